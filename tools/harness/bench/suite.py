"""The registration cost and the twin suite: their runs in the VM, and their medians as table rows."""

import glob
import json
import os
import re
import shutil
import statistics
import subprocess

from harness.bench import env as envmod

SUITE_GROUPS = ("lat", "bw", "rate", "cq")
"""The groups of benchmarks/bench, each run in its own process per pass."""
PAGES = ("4k", "thp", "hugetlb")
"""The kinds of page registrations are timed on, one process each."""
HUGE_PAGE = 2 << 20


def gbench_args(opts, name):
    """Google Benchmark's flags of one process writing runs/suite-NAME.json."""
    return [f"--benchmark_min_time={opts.min_time}", f"--benchmark_repetitions={opts.reps}",
            "--benchmark_enable_random_interleaving=true",
            f"--benchmark_out={os.path.join(opts.runs, f'suite-{name}.json')}", "--benchmark_out_format=json"]


def bench_command(opts, name, benchmark_filter):
    """benchmarks/bench running the benchmarks BENCHMARK_FILTER matches into runs/suite-NAME.json."""
    return [os.path.join(opts.build, "benchmarks", "bench"), f"--sizes={opts.sizes}", f"--reg_max={opts.reg_max}",
            f"--benchmark_filter={benchmark_filter}", *gbench_args(opts, name)]


def group_command(opts, group, npass):
    """Pass NPASS of suite group GROUP (lat, bw, rate, cq or asio)."""
    if group == "asio":
        return [os.path.join(opts.build, "benchmarks", "bench-asio"), *gbench_args(opts, f"asio-{npass}")]
    return bench_command(opts, f"{group}-{npass}", f"^{group}/")


def registration_command(opts, pages):
    """The registrations on PAGES (4k, thp or hugetlb) pages."""
    return bench_command(opts, f"reg-{pages}", f"^reg/[^/]+/{pages}/")


def reg_cap(mem_kib):
    """The largest power of two (at least 4096) no larger than a third of MEM_KIB KiB."""
    cap = 4096
    while cap * 2 <= mem_kib * 1024 // 3:
        cap *= 2
    return cap


def hugetlb_pool(reg_max):
    """The 2 MiB huge pages a registration of REG_MAX bytes needs, one spare."""
    return (reg_max + HUGE_PAGE - 1) // HUGE_PAGE + 1


def _run(argv, out_txt, what, log, env=None):
    """Run ARGV (in ENV, default this one), its output into OUT_TXT; say when it failed."""
    with open(out_txt, "w") as f:
        try:
            status = subprocess.call(argv, stdout=f, stderr=subprocess.STDOUT, env=env)
        except OSError as e:
            f.write(f"bench: {argv[0]}: {e}\n")
            status = 127
    if status != 0:
        log(f"bench: {what} failed (see runs/)")


def _set_pool(pages):
    """Ask the kernel for PAGES huge pages; what it reserved (as text)."""
    try:
        with open("/proc/sys/vm/nr_hugepages", "w") as f:
            f.write(f"{pages}\n")
    except OSError:
        pass
    return envmod.read("/proc/sys/vm/nr_hugepages")


def run_registration(opts, log=print):
    """The registration cost, one process per kind of page; --reg-max capped at a third of the
    VM's memory (and env.json told what was tried)."""
    mem = envmod.mem_kib()
    cap = reg_cap(mem)
    if opts.reg_max > cap:
        log(f"bench: registrations capped at {cap >> 20} MiB (a third of the VM's {mem >> 10} MiB), "
            f"not {opts.reg_max >> 20} MiB")
        opts.reg_max = cap
    envmod.set_reg_max(os.path.join(opts.out, "env.json"), opts.reg_max)
    for pages in PAGES:
        pool = 0
        if pages == "hugetlb" and os.access("/proc/sys/vm/nr_hugepages", os.W_OK):
            pool = hugetlb_pool(opts.reg_max)
            reserved = _set_pool(pool)
            log(f"bench: MAP_HUGETLB pool: {reserved} of {pool} huge pages of 2 MiB reserved")
            with open(os.path.join(opts.runs, "hugetlb-pool.txt"), "w") as f:
                f.write(reserved + "\n")
        log(f"bench: registration on {pages} pages, up to {opts.reg_max >> 20} MiB")
        _run(registration_command(opts, pages), os.path.join(opts.runs, f"suite-reg-{pages}.txt"),
             f"registration on {pages} pages", log)
        if pool:
            _set_pool(0)


def run_suite(opts, log=print):
    """The twin suite: per pass each group in its own process, then bench-asio when built; then
    the Asio twins' system calls and instructions (run_counts)."""
    asio = os.path.join(opts.build, "benchmarks", "bench-asio")
    for npass in range(1, opts.passes + 1):
        groups = [g for g in SUITE_GROUPS if opts.has_group(g)]
        # The Asio adapter's twins: their own program (built only when Meson finds Asio).
        if opts.has_group("asio") and os.access(asio, os.X_OK):
            groups.append("asio")
        for group in groups:
            log(f"bench: suite {group}, pass {npass} of {opts.passes} "
                f"({opts.reps} interleaved repetitions of each twin)")
            _run(group_command(opts, group, npass), os.path.join(opts.runs, f"suite-{group}-{npass}.txt"),
                 f"{group} pass {npass}", log)
    if opts.has_group("asio") and os.access(asio, os.X_OK):
        run_counts(opts, asio, "syscalls", log)
        run_counts(opts, asio, "instructions", log)


SYSCALL_ROWS = (("send_rtt", "SEND round trip 8 B", "per round trip", 1, (100, 1100)),
                ("send_rate_q64", "SEND rate 8 B, 64 in flight", "per message", 1024, (10, 60)))
"""The Asio rows whose system calls and instructions are counted: (row, label, per what,
operations per iteration, the two fixed iteration counts of its runs: the difference leaves the
set-up out)."""


def syscall_command(asio, twin, row, iterations, out):
    """bench-asio's row ROW of twin TWIN for exactly ITERATIONS iterations under strace -c -f,
    bounded by timeout(1) (600 s): in that mode the coroutine twin has no watchdog of its own."""
    return (["timeout", "600", "strace", "-f", "-c", "-o", out, asio, f"--benchmark_filter=^asio/{twin}/{row}/",
             "--benchmark_repetitions=1"], {"RDMACXX_BENCH_ITERATIONS": str(iterations)})


def instruction_command(asio, twin, row, iterations, out):
    """The same run under callgrind (user-space instructions of the whole process, both sides of
    the loopback pair), bounded by timeout(1) (1,200 s)."""
    return (["timeout", "1200", "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", asio,
             f"--benchmark_filter=^asio/{twin}/{row}/", "--benchmark_repetitions=1"],
            {"RDMACXX_BENCH_ITERATIONS": str(iterations)})


def strace_total(text):
    """The calls of strace -c's total line in TEXT, or None."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[-1] == "total" and len(parts) >= 4:
            try:
                return int(parts[3])
            except ValueError:
                return None
    return None


def callgrind_total(text):
    """The instructions of a callgrind output file's `summary:` (or `totals:`) line in TEXT, or None."""
    for line in text.splitlines():
        m = re.match(r"^(?:summary|totals):\s+(\d+)", line)
        if m:
            return int(m.group(1))
    return None


COUNTERS = {
    "syscalls": ("strace", "system calls", "strace -c -f", syscall_command, strace_total),
    "instructions": ("valgrind", "instructions", "callgrind", instruction_command, callgrind_total),
}
"""What run_counts counts: {kind: (the program it needs, what, how, command, parser of its output)};
runs/KIND.json holds {row: {twin: count per round trip or message}}."""


def run_counts(opts, asio, kind, log=print):
    """KIND (syscalls, instructions) per operation of each Asio twin (co_await, plain, raw): each
    counted row run twice with its two fixed iteration counts, the difference divided. Skipped
    (and said) without the program it needs."""
    program, what, how, command, parse = COUNTERS[kind]
    if shutil.which(program) is None:
        log(f"bench: no {program}: the Asio twins' {what} are not counted (tools/setup --bench installs it)")
        return
    result = {}
    for row, _label, _per, ops, counts in SYSCALL_ROWS:
        for twin in ("coawait", "plain", "raw"):
            totals = []
            for n in counts:
                out = os.path.join(opts.runs, f"{program}-{twin}-{row}-{n}.txt")
                argv, extra = command(asio, twin, row, n, out)
                log(f"bench: {what} of asio/{twin}/{row}, {n} iterations ({how})")
                _run(argv, os.path.join(opts.runs, f"{program}-{twin}-{row}-{n}.log"), f"{how} of {twin} {row}", log,
                     env=dict(os.environ, **extra))
                try:
                    with open(out) as f:
                        totals.append(parse(f.read()))
                except OSError:
                    totals.append(None)
            per = None
            if None not in totals:
                per = (totals[1] - totals[0]) / ((counts[1] - counts[0]) * ops)
            result.setdefault(row, {})[twin] = per
    with open(os.path.join(opts.runs, f"{kind}.json"), "w") as f:
        json.dump(result, f, indent=1)


# --- medians --------------------------------------------------------------------------------------

_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
_METRICS = ("p50_us", "p99_us", "p999_us", "bytes_per_second", "msgs", "ns_per_wc", "dereg_us", "huge_fraction",
            "allocs_per_op")


def key_of(name):
    """(twin, key) of the Google Benchmark name NAME: lat/rdmacxx/send/busy/8/manual_time is
    ("rdmacxx", "lat/send/busy/8"); a rate's size is left out of its key."""
    parts = name.split("/")
    group, twin = parts[0], parts[1]
    rest = [p for p in parts[2:] if not re.fullmatch(r"\d+|manual_time|real_time|iterations:\d+", p)]
    size = next((p for p in parts[2:] if re.fullmatch(r"\d+", p)), None)
    return twin, "/".join([group] + rest + ([size] if size and group != "rate" else []))


def collect(runs):
    """Every repetition of every pass under RUNS (suite-*.json): {(twin, key): {metric: [values]}};
    a failed benchmark is ("error", name) with its messages."""
    suite = {}
    for path in sorted(glob.glob(os.path.join(runs, "suite-*.json"))):
        try:
            with open(path) as f:
                data = json.load(f)
        except ValueError:
            continue
        for b in data.get("benchmarks", []):
            if b.get("run_type", "iteration") != "iteration":
                continue  # the aggregates: the medians are taken over every repetition of every pass
            if b.get("error_occurred"):
                suite.setdefault(("error", b["name"]), {}).setdefault("message", []).append(b.get("error_message", ""))
                continue
            m = suite.setdefault(key_of(b["name"]), {})
            m.setdefault("time_s", []).append(b["real_time"] * _UNITS[b.get("time_unit", "ns")])
            for k in _METRICS:
                if k in b:
                    m.setdefault(k, []).append(b[k])
    return suite


def median(suite, twin, key, metric):
    """The median of METRIC over TWIN's repetitions of KEY, None without any."""
    v = suite.get((twin, key), {}).get(metric)
    return statistics.median(v) if v else None


def ratio(a, b):
    """a/b, None without both."""
    return a / b if a and b else None


# --- rows -----------------------------------------------------------------------------------------

LAT_OPS = ["send", "write", "write_imm", "read"]
ASIO_ROWS = (("send_rtt", "SEND round trip 8 B", "us RTT p50", "p50_us"),
             ("write_imm_rtt", "WRITE_IMM round trip 8 B", "us RTT p50", "p50_us"),
             ("send_rate_q64", "SEND rate 8 B, 64 in flight", "kmsg/s", "msgs"))


def _scaled(v, factor):
    """V times FACTOR, None stays None."""
    return v * factor if v is not None else None


def size_label(size):
    """SIZE bytes as the registration rows name it: 4 KiB, 16 MiB, 1 GiB."""
    return f"{size >> 30} GiB" if size >= 1 << 30 else f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


def rows(suite):
    """The main table's rows from SUITE (collect()): dicts with section, row, unit, better, rdmacxx,
    raw, lib_raw (rdmacxx/raw) and per section more (op, size, strategy, p99, p999, pages, ...)."""
    out = []

    def add(section, row, unit, better, lib, raw, **extra):
        out.append(dict(section=section, row=row, unit=unit, better=better, rdmacxx=lib, raw=raw,
                        lib_raw=ratio(lib, raw), **extra))

    def med(twin, key, metric):
        return median(suite, twin, key, metric)

    keys = twin_keys(suite)
    lat_keys = sorted((k for k in keys if k.startswith("lat/")),
                      key=lambda k: (k.split("/")[2], LAT_OPS.index(k.split("/")[1]), int(k.split("/")[3])))
    for key in lat_keys:
        _, op, strat, size = key.split("/")
        half = 0.5 if op != "read" else 1.0  # half a round trip, but a READ is timed whole
        v = {m: (_scaled(med("rdmacxx", key, m), half), _scaled(med("raw", key, m), half))
             for m in ("p50_us", "p99_us", "p999_us")}
        add("latency", f"{op} {size} B {strat}", f"us {'half RTT' if half == 0.5 else 'read'} p50", "lower",
            *v["p50_us"], p99=v["p99_us"], p999=v["p999_us"], op=op, strategy=strat, size=int(size))

    for key in sorted((k for k in keys if k.startswith("bw/")), key=lambda k: (k.split("/")[1], int(k.split("/")[2]))):
        _, op, size = key.split("/")
        add("bandwidth", f"{op} {size} B", "MB/s", "higher", _mb(med("rdmacxx", key, "bytes_per_second")),
            _mb(med("raw", key, "bytes_per_second")), op=op, size=int(size))

    for key in rate_keys(suite):
        parts = key.split("/")
        add("message rate (8 B)", f"{parts[1]} {'/'.join(parts[2:])}", "kmsg/s", "higher",
            _k(med("rdmacxx", key, "msgs")), _k(med("raw", key, "msgs")), op=parts[1], config="/".join(parts[2:]))

    for key in sorted(k for k in keys if k.startswith("cq/")):
        metric = "time_s" if key.endswith("empty") else "ns_per_wc"
        lib, raw = med("rdmacxx", key, metric), med("raw", key, metric)
        if metric == "time_s":
            lib, raw = (v * 1e9 if v is not None else None for v in (lib, raw))
        add("completion", key[3:].replace("/", " "), "ns per poll" if metric == "time_s" else "ns per WC", "lower",
            lib, raw)

    for key in reg_keys(suite):
        parts = key.split("/")
        pages, size = (parts[1], int(parts[2])) if len(parts) == 3 else ("4k", int(parts[1]))
        lib, raw = med("rdmacxx", key, "time_s"), med("raw", key, "time_s")
        add("registration", f"register_memory {size_label(size)} {pages}", "us", "lower",
            lib * 1e6 if lib else None, raw * 1e6 if raw else None,
            size=size, pages=pages, huge_fraction=med("rdmacxx", key, "huge_fraction"))
    return out


def _mb(v):
    """Bytes per second as MB/s."""
    return v / 1e6 if v is not None else None


def _k(v):
    """Messages per second as kmsg/s."""
    return v / 1e3 if v is not None else None


def twin_keys(suite):
    """The keys SUITE has figures of (a failed benchmark's name is not one)."""
    return {k for (t, k) in suite if t != "error"}


def rate_keys(suite):
    """The message-rate keys of SUITE, sorted."""
    return sorted(k for k in twin_keys(suite) if k.startswith("rate/"))


def reg_keys(suite):
    """The registration keys of SUITE, by kind of page, then size."""
    def order(k):
        pages = k.split("/")[1]
        return (PAGES.index(pages) if pages in PAGES else 9, int(k.split("/")[-1]))
    return sorted((k for k in twin_keys(suite) if k.startswith("reg/")), key=order)


def reg_errors(suite):
    """The messages of the registrations that failed."""
    return sorted({m for (t, k), v in suite.items() if t == "error" and k.startswith("reg/") for m in v["message"]})


def errors(suite):
    """(benchmark, message) of every benchmark that failed."""
    return sorted({(k, m) for (t, k), v in suite.items() if t == "error" for m in v["message"]})


def checked_rows(suite):
    """The in-flight tracking rows: (key, checked, rdmacxx, raw) message rates of each rate key that
    has a checked<busy_poll> twin."""
    return [(k, median(suite, "rdmacxx-checked", k, "msgs"), median(suite, "rdmacxx", k, "msgs"),
             median(suite, "raw", k, "msgs"))
            for k in rate_keys(suite) if median(suite, "rdmacxx-checked", k, "msgs")]


def syscall_rows(runs, kind="syscalls"):
    """The Asio twins' KIND (syscalls, instructions) per operation from RUNS/KIND.json:
    [(label, per, {twin: count})]."""
    try:
        with open(os.path.join(runs, f"{kind}.json")) as f:
            counted = json.load(f)
    except (OSError, ValueError):
        return []
    return [(label, per, counted[row]) for row, label, per, _ops, _counts in SYSCALL_ROWS if row in counted]


def asio_rows(suite):
    """The Asio table's rows (bench-asio): co_await against the plain and raw event-driven twins."""
    twins = ("coawait", "plain", "raw")
    out = []
    for r, label, unit, metric in ASIO_ROWS:
        key = f"asio/{r}/8"
        v = {t: median(suite, t, key, metric) for t in twins}
        if not any(v.values()):
            continue
        if metric == "msgs":
            v = {t: _k(x) for t, x in v.items()}
        out.append(dict(row=r, label=label, unit=unit, better="higher" if metric == "msgs" else "lower",
                        coawait=v["coawait"], plain=v["plain"], raw=v["raw"],
                        coawait_plain=ratio(v["coawait"], v["plain"]), coawait_raw=ratio(v["coawait"], v["raw"]),
                        plain_raw=ratio(v["plain"], v["raw"]),
                        p99={t: median(suite, t, key, "p99_us") for t in twins} if metric == "p50_us" else None,
                        allocs_per_op={t: median(suite, t, key, "allocs_per_op") for t in twins}))
    return out

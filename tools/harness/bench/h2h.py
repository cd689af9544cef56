"""The head to head: its rows, each tool's command lines, the runs in the VM, and the figures of their outputs."""

import glob
import os
import re
import subprocess
import time

# The head-to-head rows: (name, test, flags), the same flags for both tools.
ROWS = (
    ("send_lat_8", "send_lat", "-s 8 -n 500 -I 0"),
    ("write_lat_8", "write_lat", "-s 8 -n 500 -I 0"),
    ("read_lat_8", "read_lat", "-s 8 -n 500"),
    ("atomic_lat_8", "atomic_lat", "-n 500"),
    ("send_lat_8_events", "send_lat", "-s 8 -n 500 -I 0 -e"),
    ("send_bw_65536", "send_bw", "-s 65536 -n 200 -t 128 -Q 16 -l 1 -I 0"),
    ("write_bw_65536", "write_bw", "-s 65536 -n 200 -t 128 -Q 16 -l 1 -I 0"),
    ("read_bw_65536", "read_bw", "-s 65536 -n 200 -t 128 -Q 16 -l 1"),
    ("write_bw_65536_bidir", "write_bw", "-s 65536 -n 200 -t 128 -Q 16 -l 1 -I 0 -b"),
    ("send_rate_8", "send_bw", "-s 8 -n 4096 -t 128 -l 16 -Q 16 -I 0"),
    ("write_rate_8", "write_bw", "-s 8 -n 4096 -t 128 -l 16 -Q 16 -I 0"),
    ("read_rate_8", "read_bw", "-s 8 -n 4096 -t 128 -l 1 -Q 16"),
    ("atomic_rate_8", "atomic_bw", "-n 4096 -t 128 -l 1 -Q 16"),
)
QUICK_ROWS = ("send_lat_8", "write_lat_8", "write_bw_65536", "send_rate_8")
"""The rows of --quick."""

TOOLS = ("perftest", "rdmacxx")
FIRST_PORT = 18601
"""The TCP port of the first run; every run takes the next one."""


def rows(quick):
    """The rows of the block 'same': (name, test, flags as a list)."""
    return [(name, test, flags.split()) for name, test, flags in ROWS if not quick or name in QUICK_ROWS]


def default_rows(quick):
    """The rows of the block 'defaults': each tool with nothing but -s (and the device flags)."""
    sizes = (8,) if quick else (2, 8, 64)
    return [(f"{op}_default_{s}", f"{op}_bw", ["-s", str(s)]) for op in ("send", "write") for s in sizes]


def tool_order(rep):
    """The tools in the order repetition REP (from 1) runs them: flipped every repetition."""
    return list(TOOLS) if rep % 2 else list(reversed(TOOLS))


def commands(tool, test, flags, device, gid, port, server, build):
    """(server command, client command) of TOOL running TEST with FLAGS on DEVICE and GID index GID,
    over TCP port PORT, the client connecting to SERVER; rdmacxx-perf is the one in BUILD."""
    common = ["-d", device, "-x", str(gid), "-p", str(port)]
    if tool == "perftest":
        argv = [f"ib_{test}", *common, "-F", *flags]
    else:
        argv = [os.path.join(build, "benchmarks", "perf", "rdmacxx-perf"), test, *common, *flags]
    return argv, [*argv, server]


def schedule(opts):
    """Every run of the head to head, in order: (block, name, tool, rep, test, flags), the tools
    alternating and the order flipping every repetition."""
    runs = []
    for rep in range(1, opts.h2h_reps + 1):
        for block, table in (("same", rows(opts.quick)), ("defaults", default_rows(opts.quick))):
            for name, test, flags in table:
                runs += [(block, name, tool, rep, test, flags) for tool in tool_order(rep)]
    return runs


def pair(prefix, server, client, client_prefix=(), log=print):
    """One server (here, in the background) and one client (here, or after CLIENT_PREFIX: ssh to
    node 2), both under timeout; their outputs go to PREFIX.server.txt and PREFIX.client.txt. The
    client tries again (ten times at most, a second apart) while the server waits."""
    with open(f"{prefix}.server.txt", "w") as out:
        # stdin from /dev/null: ssh (--nodes 2) would otherwise read the caller's input.
        spid = subprocess.Popen(["timeout", "180", *server], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    time.sleep(0.5)
    for _ in range(10):
        with open(f"{prefix}.client.txt", "w") as out:
            rc = subprocess.call([*client_prefix, "timeout", "180", *client], stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if rc == 0 or spid.poll() is not None:
            break
        time.sleep(1)
    if spid.wait() != 0:
        log(f"bench: {os.path.basename(prefix)} failed (see runs/)")


def run(opts, device, gid, server, client_prefix=(), log=print):
    """The head to head in the VM: every run of schedule(OPTS) through pair(), outputs under runs/."""
    port = FIRST_PORT
    rep_seen = 0
    for block, name, tool, rep, test, flags in schedule(opts):
        if rep != rep_seen:
            rep_seen = rep
            log(f"bench: head to head, repetition {rep} of {opts.h2h_reps}")
        server_cmd, client_cmd = commands(tool, test, flags, device, gid, port, server, opts.build)
        pair(os.path.join(opts.runs, f"h2h.{block}.{name}.{tool}.{rep}"), server_cmd, client_cmd, client_prefix, log)
        port += 1


def figures(path):
    """perftest's columns, as perftest and rdmacxx-perf both print them: the first row under #bytes.

    Returns {} without the file, else what it found of: inline (bytes), lat, p99, p999 (usec), bw
    (MiB/s), mpps."""
    if not os.path.exists(path):
        return {}
    with open(path, errors="replace") as f:
        text = f.read()
    rec = {}
    mi = re.search(r"Max inline data\s*:\s*(\d+)\s*\[B\]|Inline data\s*:\s*up to (\d+) bytes", text)
    if mi:
        rec["inline"] = int(mi.group(1) or mi.group(2))
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "#bytes" not in line:
            continue
        for row in lines[i + 1:]:
            f = row.split()
            if f and re.fullmatch(r"\d+", f[0]):
                vals = [float(x) for x in f if re.fullmatch(r"[-+0-9.eE]+", x)]
                if "t_typical" in line and len(vals) >= 9:
                    rec.update(lat=vals[4], p99=vals[7], p999=vals[8])
                elif "MsgRate" in line and len(vals) >= 5 and vals[4] > 0:
                    rec.update(bw=vals[3], mpps=vals[4])
                break
        break
    return rec


def collect(runs):
    """The figures of every head-to-head run under RUNS: (vals, inline, failed), keyed by (block,
    row, tool): vals {metric: [values]}, inline the inline size a tool reported, failed the
    repetitions (as text) without figures. The client's figures, else the server's."""
    vals, inline, failed = {}, {}, {}
    for path in sorted(glob.glob(os.path.join(runs, "h2h.*.client.txt"))):
        _, block, row, tool, rep, _, _ = os.path.basename(path).split(".")
        rec = figures(path)
        if not (rec.get("lat") or rec.get("mpps")):
            server = figures(path.replace(".client.txt", ".server.txt"))
            if server.get("lat") or server.get("mpps"):
                rec = server
        if "inline" in rec:
            inline[(block, row, tool)] = rec["inline"]
        if not (rec.get("lat") or rec.get("mpps")):
            failed.setdefault((block, row, tool), []).append(rep)
        for k in ("lat", "p99", "bw", "mpps"):
            if rec.get(k):
                vals.setdefault((block, row, tool), {}).setdefault(k, []).append(rec[k])
    return vals, inline, failed


def kind(row):
    """lat, bw, rate or default: what row ROW measures ("?" if its name says nothing)."""
    m = re.match(r"[a-z]+_(lat|bw|rate|default)_", row)
    return m.group(1) if m else "?"


def describe(row):
    """ROW's name in the tables: send_rate_8 is "send_bw rate 8 B"."""
    m = re.match(r"(send|write|read|atomic)_(lat|bw|rate|default)_(\d+)(?:_(\w+))?", row)
    if not m:
        return row
    op, what, size, extra = m.groups()
    s = int(size)
    size_txt = f"{s >> 10} KiB" if s >= 1024 else f"{s} B"
    name = {"lat": f"{op}_lat", "bw": f"{op}_bw", "rate": f"{op}_bw rate", "default": f"{op}_bw defaults"}[what]
    return f"{name} {size_txt}" + (f" {extra}" if extra else "")


def sort_key(row):
    """The rows' order in a table: latency, bandwidth, rate, defaults; then operation, size, name."""
    size = re.search(r"_(\d+)", row)
    return (["lat", "bw", "rate", "default"].index(kind(row)) if kind(row) != "?" else 9,
            row.split("_")[0], int(size.group(1)) if size else 0, row)


def metric(row):
    """(metric, unit, better) of ROW's table line."""
    k = kind(row)
    if k == "lat":
        return "lat", "usec t_typical", "lower"
    if k == "bw":
        return "bw", "MiB/s average", "higher"
    return "mpps", "Mpps", "higher"


def ratio_verdict(perftest, rdmacxx, better):
    """(rdmacxx/perftest, verdict): ok when rdmacxx is no worse, BEHIND when it is; None and "-"
    without both figures."""
    ratio = rdmacxx / perftest if perftest and rdmacxx else None
    good = None if ratio is None else (ratio <= 1.0 if better == "lower" else ratio >= 1.0)
    return ratio, "-" if good is None else ("ok" if good else "BEHIND")

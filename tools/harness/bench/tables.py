"""The tables: head-to-head.txt/.json and suite.txt/.json from the raw outputs under DIR/runs."""

import glob
import json
import os
import statistics
import sys

from harness.bench import env as envmod
from harness.bench import h2h, plots, suite

H2H_BLOCKS = (("same", "identical flags: perftest and rdmacxx-perf given the same flags"),
              ("defaults", "each tool's defaults: `ib_X_bw -s S` against `rdmacxx-perf X_bw -s S` (message rate)"))
H2H_ENV = ("device", "active_mtu", "gid_index", "kernel", "cpus", "memory", "rdma_core", "perftest", "compiler",
           "host_cpus", "host_load_before", "host_load_after", "boot_s")
SUITE_ENV = ("device", "active_mtu", "gid_index", "gid", "kernel", "cpus", "rdma_core", "route", "host_cpus",
             "host_load_before", "host_load_after")


def fmt4(v):
    """A head-to-head figure: 4 significant digits, whole numbers from 1000 on, "-" for none."""
    return "-" if v is None else (f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}")


def spread(v):
    """The min-max of the per-run figures V."""
    return f"{fmt4(min(v))}-{fmt4(max(v))}" if v else "-"


def fmt3(v):
    """A suite figure: 3 significant digits, whole numbers from 100 on, "-" for none."""
    if v is None:
        return "-"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def r3(v):
    """A ratio with 3 decimals, "-" for none."""
    return f"{v:.3f}" if v else "-"


# --- head to head ---------------------------------------------------------------------------------

def h2h_block(block, title, vals, inline, failed):
    """One head-to-head table (BLOCK same or defaults): (its text, its JSON rows); ("", []) when
    it has no row."""
    names = []
    for (b, row, _) in list(vals) + list(failed):
        if b == block and row not in names:
            names.append(row)
    names.sort(key=h2h.sort_key)
    if not names:
        return "", []
    hdr = (f"{'row':<30} {'metric':<17} {'perftest':>9} {'spread':>17} {'rdmacxx':>9} {'spread':>17} "
           f"{'rdmacxx/perftest':>16}  verdict")
    lines = [f"## {title}", hdr, "-" * len(hdr)]
    rows_json = []
    for row in names:
        pt, rx = vals.get((block, row, "perftest"), {}), vals.get((block, row, "rdmacxx"), {})
        metric, unit, better = h2h.metric(row)
        a, b = pt.get(metric, []), rx.get(metric, [])
        ma = statistics.median(a) if a else None
        mb = statistics.median(b) if b else None
        ratio, verdict = h2h.ratio_verdict(ma, mb, better)
        lines.append(f"{h2h.describe(row):<30} {unit:<17} {fmt4(ma):>9} {spread(a):>17} {fmt4(mb):>9} {spread(b):>17} "
                     f"{(f'{ratio:.3f}' if ratio else '-'):>16}  {verdict}")
        rows_json.append(dict(block=block, row=row, metric=metric, unit=unit, better=better, perftest=ma, rdmacxx=mb,
                              perftest_runs=a, rdmacxx_runs=b, ratio=ratio,
                              inline_perftest=inline.get((block, row, "perftest")),
                              inline_rdmacxx=inline.get((block, row, "rdmacxx"))))
    if block == "defaults":
        pti = sorted({v for (b, r, t), v in inline.items() if b == block and t == "perftest"})
        rxi = sorted({v for (b, r, t), v in inline.items() if b == block and t == "rdmacxx"})
        lines.append(f"(perftest's defaults: -t 128, post list 1, CQ moderation 100, inline up to {pti or '?'} B; "
                     f"rdmacxx-perf's: -t 128, chains of 16, one in 64 signaled, inline up to {rxi or '?'} B)")
    bad = [f"{h2h.describe(r)} {t} (repetitions {','.join(v)})"
           for (b, r, t), v in sorted(failed.items()) if b == block]
    if bad:
        lines.append("runs without figures (see runs/): " + "; ".join(bad))
    return "\n".join(lines), rows_json


def h2h_text(env, vals, inline, failed):
    """head-to-head.txt's text (without its last newline) and head-to-head.json's rows."""
    tables, rows_json = [], []
    for block, title in H2H_BLOCKS:
        text, rows = h2h_block(block, title, vals, inline, failed)
        if text:
            tables.append(text)
            rows_json += rows
    if env.get("nodes", "1") != "1":
        where = "server on node 1, client on node 2 (" + env.get("nodes", "") + ")"
    else:
        where = "server and client as two processes in one VM, client to " + (env.get("address") or "?")
    foot = ["", "environment: " + ", ".join(f"{k} {env[k]}" for k in H2H_ENV if k in env),
            f"medians over {env.get('h2h_reps')} repetitions per tool, the tools alternating (the order flipped every "
            f"repetition); spread: min-max of the per-run figures; {where}; Soft-RoCE under QEMU TCG: the software "
            "path, not a NIC, on a shared host: only the ratios mean anything. Latency: lower is better (ok: ratio "
            "<= 1); bandwidth and message rate: higher is better (ok: ratio >= 1)."]
    return "\n\n".join(tables) + "\n" + "\n".join(foot), rows_json


def h2h_report(out, host_cpus=None):
    """Print head-to-head.txt of the run in OUT and write it and head-to-head.json."""
    env = envmod.for_tables(out, boot=True, host_cpus=host_cpus)
    text, rows_json = h2h_text(env, *h2h.collect(os.path.join(out, "runs")))
    print(text)
    with open(os.path.join(out, "head-to-head.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out, "head-to-head.json"), "w") as f:
        json.dump({"environment": env, "rows": rows_json}, f, indent=1)


# --- the twin suite -------------------------------------------------------------------------------

def suite_main(rows):
    """The main tables, one per section, and the latency tails."""
    lines = []
    hdr = f"{'row':<34} {'unit':<18} {'rdmacxx':>9} {'raw':>9} {'rdmacxx/raw':>11}"
    section = None
    for r in rows:
        if r["section"] != section:
            section = r["section"]
            lines += ["", f"## {section}" + (" (lower is better)" if r["better"] == "lower" else " (higher is better)"),
                      hdr, "-" * len(hdr)]
        lr = f"{r['lib_raw']:.3f}" if r["lib_raw"] else "-"
        extra = (f"   (huge pages: {r['huge_fraction']:.0%} of the buffer)"
                 if r.get("pages") == "thp" and r.get("huge_fraction") is not None else "")
        lines.append(f"{r['row']:<34} {r['unit']:<18} {fmt3(r['rdmacxx']):>9} {fmt3(r['raw']):>9} {lr:>11}{extra}")
    tails = [r for r in rows if r["section"] == "latency"]
    if tails:
        lines += ["", "## latency tails (us; same conventions): p99 and p99.9",
                  f"{'row':<34} {'rdmacxx p99':>11} {'raw p99':>9} {'rdmacxx p99.9':>13} {'raw p99.9':>9}"]
        for r in tails:
            a, b = r["p99"], r["p999"]
            lines.append(f"{r['row']:<34} {fmt3(a[0]):>11} {fmt3(a[1]):>9} {fmt3(b[0]):>13} {fmt3(b[1]):>9}")
    return lines


def suite_checked(checked):
    """What in-flight tracking (checked<busy_poll>) costs, against plain rdmacxx and raw verbs."""
    if not checked:
        return []
    lines = ["", "## in-flight tracking: message rate of checked<busy_poll> queue pairs (kmsg/s, higher is better)",
             f"{'row':<34} {'checked':>9} {'rdmacxx':>9} {'raw':>9} {'checked/rdmacxx':>15} {'checked/raw':>11}"]
    for k, c, lib, raw in checked:
        lines.append(f"{k[5:].replace('/', ' '):<34} {c / 1e3:>9.1f} {fmt3(lib / 1e3 if lib else None):>9} "
                     f"{fmt3(raw / 1e3 if raw else None):>9} {(c / lib if lib else 0):>15.3f} "
                     f"{(c / raw if raw else 0):>11.3f}")
    return lines


def suite_asio(asio_rows):
    """The Asio table (bench-asio): co_await against the plain and raw event-driven twins."""
    if not asio_rows:
        return []
    hdr = (f"{'row':<28} {'unit':<11} {'co_await':>9} {'plain':>9} {'raw':>9} {'co_await/plain':>14} "
           f"{'co_await/raw':>12} {'plain/raw':>9} {'allocs/op':>9}")
    lines = ["", "## Asio: co_await on rdmacxx::io against the plain event-driven twin (rdmacxx, no Asio) and the "
             "raw-verbs event-driven twin (bench-asio)", hdr, "-" * len(hdr)]
    for r in asio_rows:
        al = r["allocs_per_op"]["coawait"]
        lines.append(f"{r['label']:<28} {r['unit']:<11} {fmt3(r['coawait']):>9} {fmt3(r['plain']):>9} "
                     f"{fmt3(r['raw']):>9} "
                     f"{r3(r['coawait_plain']):>14} {r3(r['coawait_raw']):>12} {r3(r['plain_raw']):>9} "
                     f"{(f'{al:.3f}' if al is not None else '-'):>9}")
    for r in asio_rows:
        if r["p99"]:
            q = r["p99"]
            lines.append(f"{r['label']:<28} {'us RTT p99':<11} {fmt3(q['coawait']):>9} {fmt3(q['plain']):>9} "
                         f"{fmt3(q['raw']):>9}")
    others = sorted({v for r in asio_rows for t, v in r["allocs_per_op"].items() if t != "coawait" and v is not None})
    lines.append("round trips: lower is better; rate: higher is better. allocs/op: co_await's heap allocations per "
                 "operation (one posted request or receive) in the timed loop"
                 + (f" (plain and raw: {', '.join(f'{v:.3g}' for v in others)})" if others else "")
                 + "; one process, a loopback RC pair on one event-driven CQ per twin, every request signaled")
    return lines


def suite_syscalls(rows, title="system calls per operation (strace -c -f", digits=fmt3):
    """The Asio twins' counts per operation (system calls by default), from suite.syscall_rows()."""
    if not rows:
        return []
    hdr = f"{'row':<28} {'per':<15} {'co_await':>9} {'plain':>9} {'raw':>9} {'co_await/plain':>14}"
    lines = ["", f"## Asio: {title} over two fixed iteration counts, the difference divided)", hdr,
             "-" * len(hdr)]
    for label, per, v in rows:
        c, p, r = v.get("coawait"), v.get("plain"), v.get("raw")
        lines.append(f"{label:<28} {per:<15} {digits(c):>9} {digits(p):>9} {digits(r):>9} "
                     f"{r3(suite.ratio(c, p)):>14}")
    return lines


def _whole(v):
    return "-" if v is None else f"{v:.0f}"


def suite_text(env, figures, syscalls=(), instructions=()):
    """suite.txt's text (without its last newline) and suite.json's rows and Asio rows, from the
    medians of FIGURES (suite.collect())."""
    rows = suite.rows(figures)
    asio_rows = suite.asio_rows(figures)
    lines = (suite_main(rows) + suite_checked(suite.checked_rows(figures)) + suite_asio(asio_rows)
             + suite_syscalls(syscalls)
             + suite_syscalls(instructions, "user-space instructions per operation (callgrind, the whole process",
                              _whole))
    reg_errors = suite.reg_errors(figures)
    if suite.reg_keys(figures) or reg_errors:
        reg_ok = [r["size"] for r in rows if r["section"] == "registration" and r["rdmacxx"] and r["raw"]]
        lines += ["", f"registration: went up to {max(reg_ok) >> 20 if reg_ok else 0} MiB (--reg-max "
                  f"{env.get('reg_max')}; VM memory {env.get('memory')})"
                  + (f"; failures: {'; '.join(reg_errors)}" if reg_errors else "")]
    for k, m in suite.errors(figures):
        lines.append(f"error: {k}: {m}")
    lines += ["", "environment: " + ", ".join(f"{k} {env[k]}" for k in SUITE_ENV if k in env),
              "medians over %s passes x %s interleaved repetitions per twin; Soft-RoCE under QEMU emulation: the "
              "software path, not a NIC; only the ratios mean anything." % (env.get("passes"), env.get("reps"))]
    return "\n".join(lines).lstrip("\n"), rows, asio_rows


def suite_report(out, host_cpus=None, plot=True):
    """Print suite.txt of the run in OUT, write it, suite.json and (with PLOT) the plots."""
    env = envmod.for_tables(out, host_cpus=host_cpus)
    figures = suite.collect(os.path.join(out, "runs"))
    runs = os.path.join(out, "runs")
    text, rows, asio_rows = suite_text(env, figures, suite.syscall_rows(runs),
                                       suite.syscall_rows(runs, "instructions"))
    print(text)
    with open(os.path.join(out, "suite.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out, "suite.json"), "w") as f:
        json.dump({"environment": env, "rows": rows, "asio": asio_rows,
                   "suite": {f"{t}:{k}": v for (t, k), v in figures.items()}}, f, indent=1)
    if plot:
        plots.draw(out, rows)
    print(f"\nbench: wrote {out}/suite.txt, suite.json, env.json, latency.svg/.png, bandwidth.svg/.png")


def report(out, host_cpus=None, plot=True):
    """Every table the raw outputs under OUT/runs have: the head to head when a client wrote
    anything, the suite when it wrote JSON. Returns the exit status."""
    runs = os.path.join(out, "runs")
    has_h2h = bool(glob.glob(os.path.join(runs, "h2h.*.client.txt")))
    has_suite = bool(glob.glob(os.path.join(runs, "suite-*.json")))
    if (has_h2h or has_suite) and not os.path.exists(os.path.join(out, "env.json")):
        print(f"bench: {out}/env.json is missing: not the folder of a tools/bench run", file=sys.stderr)
        return 1
    if has_h2h:
        h2h_report(out, host_cpus)
    if has_suite:
        suite_report(out, host_cpus, plot)
    from harness.bench import multirail
    table = multirail.report(runs)
    if table:
        with open(os.path.join(out, "multirail.txt"), "w") as f:
            f.write(table)
        print(table)
    return 0

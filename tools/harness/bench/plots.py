"""The plots: latency.svg/.png and bandwidth.svg/.png of the twin suite, drawn by gnuplot."""

import os
import subprocess
import sys


def dat(path, series):
    """Write gnuplot's data file PATH: per line a size and its values (NaN for none)."""
    with open(path, "w") as f:
        for size, vals in series:
            f.write(f"{size} " + " ".join("NaN" if v is None else f"{v:.6g}" for v in vals) + "\n")
    return path


def script(svg, title, ylabel, files, logy):
    """gnuplot's script drawing FILES ({op: data file}, rdmacxx and raw verbs per op) into SVG and
    the PNG beside it."""
    plots = []
    for op, path in files.items():
        for col, who, dt in ((2, "rdmacxx", 1), (3, "raw verbs", 2)):
            plots.append(f"'{path}' using 1:{col} with linespoints dt {dt} title '{op} {who}'")
    body = f"""set title '{title}'
set xlabel 'message size (bytes)'
set ylabel '{ylabel}'
set logscale x 2
set format x '%.0b %BB'
{'set logscale y' if logy else ''}
set grid
set key left top
set datafile missing 'NaN'
plot {', '.join(plots)}"""
    return f"""set terminal svg size 900,560 dynamic font 'sans,12'
set output '{svg}'
{body}
set terminal pngcairo size 900,560 font 'sans,10'
set output '{svg[:-4]}.png'
replot
"""


def gnuplot(text):
    """Run gnuplot on TEXT; False (and why, on stderr) when it failed."""
    try:
        subprocess.run(["gnuplot"], input=text, text=True, check=True)
        return True
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"bench: gnuplot failed ({e}); install gnuplot-nox (tools/setup --bench)", file=sys.stderr)
        return False


def series(rows, section, op, **match):
    """(size, (rdmacxx, raw)) of the ROWS of SECTION for operation OP (and the fields MATCH)."""
    return [(r["size"], (r["rdmacxx"], r["raw"])) for r in rows
            if r["section"] == section and r.get("op") == op and all(r.get(k) == v for k, v in match.items())]


def draw(out, rows):
    """The data files and the plots of the suite's ROWS in OUT: latency (busy polling) of send,
    write and read, bandwidth of write and send, by message size."""
    lat_files = {}
    for op in ("send", "write", "read"):
        s = series(rows, "latency", op, strategy="busy")
        if s:
            lat_files[op] = dat(os.path.join(out, f"latency-{op}.dat"), s)
    bw_files = {}
    for op in ("write", "send"):
        s = series(rows, "bandwidth", op)
        if s:
            bw_files[op] = dat(os.path.join(out, f"bandwidth-{op}.dat"), s)
    if lat_files:
        gnuplot(script(os.path.join(out, "latency.svg"),
                       "Latency by message size (Soft-RoCE under QEMU TCG; median, half RTT for send/write)",
                       "microseconds", lat_files, True))
    if bw_files:
        gnuplot(script(os.path.join(out, "bandwidth.svg"), "Bandwidth by message size (Soft-RoCE under QEMU TCG)",
                       "MB/s", bw_files, True))

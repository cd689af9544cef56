"""One rail against two (--nodes 2 --rails 2): examples/multirail_copy from node 1 to node 2 over
rxe0 alone and over rxe0 and rxe1 striped, alternately, --h2h-reps times each; MB/s per run and
the ratio of the medians."""

import json
import os
import re
import statistics
import subprocess

ROWS = (("one rail (rxe0)", "rxe0"), ("two rails (rxe0,rxe1), striped", "rxe0,rxe1"))
"""(label, the devices multirail_copy is given)."""


def command(opts, devices, mib, rounds):
    """mpirun of multirail_copy with one rank per node (MPI's own traffic on TCP over eth0)."""
    return ["timeout", "600", "mpirun", "--allow-run-as-root", "-H", os.environ["RDMACXX_NODES"], "-np", "2",
            "--mca", "pml", "ob1", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "eth0",
            os.path.join(opts.build, "examples", "multirail_copy"), "-d", devices, "-s", str(mib), "-r", str(rounds)]


def throughput(text):
    """The MB/s of multirail_copy's "copied:" line, and whether every round was verified; None when absent."""
    m = re.search(r"^copied: .* ([0-9.]+) MB/s$", text, re.M)
    v = re.search(r"^verified: ([0-9]+) of ([0-9]+) rounds", text, re.M)
    if not m or not v or v.group(1) != v.group(2):
        return None
    return float(m.group(1))


def run(opts, log=print):
    """The runs, alternating the rows, into OPTS.runs/multirail-*.txt and OUT/runs/multirail.json."""
    mib, rounds = (16, 2) if opts.quick else (64, 3)
    result = {label: [] for label, _ in ROWS}
    for rep in range(opts.h2h_reps):
        order = ROWS if rep % 2 == 0 else tuple(reversed(ROWS))
        for label, devices in order:
            log(f"bench: multirail_copy over {devices}, {rounds} rounds of {mib} MiB (repetition {rep + 1})")
            done = subprocess.run(command(opts, devices, mib, rounds), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, check=False)
            name = devices.replace(",", "+")
            with open(os.path.join(opts.runs, f"multirail-{name}-{rep + 1}.txt"), "w") as f:
                f.write(done.stdout)
            result[label].append(throughput(done.stdout) if done.returncode == 0 else None)
    with open(os.path.join(opts.runs, "multirail.json"), "w") as f:
        json.dump({"mib": mib, "rounds": rounds, "rows": result}, f)


def report(runs):
    """The table of OUT/runs/multirail.json, or "" when there is none."""
    path = os.path.join(runs, "multirail.json")
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        data = json.load(f)
    lines = [f"## multi-rail: examples/multirail_copy node 1 -> node 2, {data['rounds']} rounds of {data['mib']} MiB "
             "in 1 MiB WRITEs (256 KiB chunks)",
             f"{'row':34} {'MB/s median':>12} {'min-max':>15} {'runs':>5}",
             "-" * 70]
    medians = {}
    for label, values in data["rows"].items():
        good = [v for v in values if v is not None]
        if not good:
            lines.append(f"{label:34} {'failed':>12}")
            continue
        medians[label] = statistics.median(good)
        lines.append(f"{label:34} {medians[label]:12.2f} {f'{min(good):.2f}-{max(good):.2f}':>15} "
                     f"{len(good):>3}/{len(values)}")
    one, two = (label for label, _ in ROWS)
    if one in medians and two in medians:
        lines.append(f"two rails / one rail: {medians[two] / medians[one]:.3f}")
    return "\n".join(lines) + "\n"

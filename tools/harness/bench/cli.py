"""tools/bench's flags, and what runs where: the host run, the device run (--inside) and the report."""

import dataclasses
import os
import re
import sys

GROUPS = ("reg", "lat", "bw", "rate", "cq", "asio")
"""The suite's groups, in the order --groups names them."""


class UsageError(Exception):
    """A bad command line: tools/bench says why and exits with status 2."""


@dataclasses.dataclass
class Options:
    """What one tools/bench run does; paths are absolute once parse() returns."""

    top: str
    out: str = ""
    nodes: int = 1
    rails: int = 1
    reps: int = 3
    h2h_reps: int = 5
    passes: int = 2
    min_time: str = "0.05"
    sizes: str = "reduced"
    reg_max: int = 1073741824
    build: str = "build-perf"
    perftest: bool = True
    suite: bool = True
    groups: list = dataclasses.field(default_factory=lambda: list(GROUPS))
    quick: bool = False
    inside: bool = False
    report_only: bool = False
    help: bool = False

    def has_group(self, group):
        """True when the suite runs GROUP."""
        return group in self.groups

    @property
    def runs(self):
        """The folder of raw outputs."""
        return os.path.join(self.out, "runs")


# The flags that take a value: flag -> (Options field, the message when the value is missing).
_VALUED = {
    "--out": ("out", "--out needs a folder"),
    "--nodes": ("nodes", "--nodes needs a number"),
    "--rails": ("rails", "--rails needs a number"),
    "--reps": ("reps", "--reps needs a number"),
    "--h2h-reps": ("h2h_reps", "--h2h-reps needs a number"),
    "--passes": ("passes", "--passes needs a number"),
    "--min-time": ("min_time", "--min-time needs seconds"),
    "--reg-max": ("reg_max", "--reg-max needs bytes"),
    "--build": ("build", "--build needs a folder"),
    "--groups": ("groups", "--groups needs a list"),
}
# Flags without a value: flag -> (Options field, value set).
_SWITCHES = {
    "--full": ("sizes", "full"),
    "--quick": ("quick", True),
    "--no-perftest": ("perftest", False),
    "--no-suite": ("suite", False),
    "--report-only": ("report_only", True),
    "--inside": ("inside", True),
    "-h": ("help", True),
    "--help": ("help", True),
}


def parse(argv, top, cwd=None):
    """Options from tools/bench's arguments ARGV; TOP is the source tree, CWD resolves a relative --out.

    Raises UsageError with the message to print."""
    opts = Options(top=top)
    given = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in _SWITCHES:
            field, value = _SWITCHES[arg]
            setattr(opts, field, value)
            if opts.help:
                return opts  # the help, whatever follows
            i += 1
        elif arg in _VALUED:
            field, missing = _VALUED[arg]
            if i + 1 >= len(argv) or (argv[i + 1] == "" and arg != "--groups"):
                raise UsageError(missing)
            given[field] = argv[i + 1]
            i += 2
        else:
            raise UsageError(f"unknown argument {arg} (see --help)")
    if given.get("nodes", "1") not in ("1", "2"):
        raise UsageError("--nodes is 1 or 2")
    opts.nodes = int(given.get("nodes", "1"))
    if given.get("rails", "1") not in ("1", "2"):
        raise UsageError("--rails is 1 or 2")
    opts.rails = int(given.get("rails", "1"))
    if opts.rails == 2 and opts.nodes != 2:
        raise UsageError("--rails 2 goes with --nodes 2")
    for field in ("reps", "h2h_reps", "passes", "reg_max"):
        if field in given and not re.fullmatch(r"[1-9][0-9]*", given[field]):
            raise UsageError("--reps, --h2h-reps, --passes and --reg-max need positive numbers")
        if field in given:
            setattr(opts, field, int(given[field]))
    for field in ("out", "build", "min_time"):
        if field in given:
            setattr(opts, field, given[field])
    if "groups" in given:
        opts.groups = given["groups"].split()
    if opts.quick:
        if "h2h_reps" not in given:
            opts.h2h_reps = 2
        if "reps" not in given:
            opts.reps = 1
        opts.passes = 1
        opts.min_time = "0.01"
        if "reg_max" not in given:
            opts.reg_max = 16777216
    if opts.nodes == 2:
        if "out" not in given:
            opts.out = os.path.join(top, "bench-results", "nodes")
        if "build" not in given:
            opts.build = "build-nodes"
        opts.suite = False
    if not opts.out:
        opts.out = os.path.join(top, "bench-results")
    if not opts.out.startswith("/"):
        opts.out = os.path.join(cwd or os.getcwd(), opts.out)
    if not opts.build.startswith("/"):
        opts.build = os.path.join(top, opts.build)
    if opts.reg_max < 4096:
        raise UsageError("--reg-max is at least 4096")
    for group in opts.groups:
        if group not in GROUPS:
            raise UsageError(f"unknown group {group} ({' '.join(GROUPS)})")
    return opts


def inside_args(opts):
    """The arguments of the device run (tools/bench --inside) that carries OPTS into the VM."""
    args = ["--inside", "--nodes", str(opts.nodes), "--rails", str(opts.rails), "--out", opts.out, "--reps", str(opts.reps),
            "--h2h-reps", str(opts.h2h_reps), "--passes", str(opts.passes), "--min-time", opts.min_time,
            "--reg-max", str(opts.reg_max), "--build", opts.build, "--groups", " ".join(opts.groups)]
    if opts.sizes == "full":
        args.append("--full")
    if opts.quick:
        args.append("--quick")
    if not opts.perftest:
        args.append("--no-perftest")
    if not opts.suite:
        args.append("--no-suite")
    return args


def main(argv, top=None):
    """tools/bench: returns the exit status (0 tables printed, 1 the run failed, 2 usage error)."""
    import harness.bench
    from harness.bench import host, inside, tables

    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # in order with what the programs it runs print
    if top is None:
        top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        opts = parse(argv, top)
    except UsageError as e:
        print(f"bench: {e}", file=sys.stderr)
        return 2
    if opts.help:
        print(harness.bench.__doc__.split("\nHow it is made")[0].rstrip("\n"))
        return 0
    if opts.inside:
        return inside.run(opts)
    if not opts.report_only:
        status = host.run(opts)
        if status:
            return status
    return tables.report(opts.out)

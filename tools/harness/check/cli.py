"""tools/check — the rdmacxx test command.

Usage: tools/check [--suite NAME]... [--list]

On a Debian 12 machine (root, or sudo) it installs what is missing (tools/setup), makes the
builds the chosen suites need, then runs the suites (all of them by default, in this order):

  tools         the harness's own unit tests (tools/harness/tests, no device)
  headers       every public header compiles on its own, g++ and clang++ (meson suite headers)
  unit          the unit tests (no device) of the g++, clang++ and ASan+UBSan builds (suite unit)
  compile-fail  misuse must not compile, with its sentence, g++ and clang++ (suite compile_fail)
  fuzz          one libFuzzer target per parser (text, and MADs from the wire), 6 s each (tools/fuzz)
  consumers     the five ways users pull rdmacxx in, and a program of the verbs alone linked
                without librdmacm (tools/consumers)
  device        one tools/softroce run (Soft-RoCE; a VM on a host without an RDMA stack): the
                device tests of the g++ and ASan+UBSan builds (meson suite device), the no-heap
                and Asio tests, the examples (server and client pairs), rdmacxx-perf and
                bench-asio smoke runs, the consumers' programs, and the instruction counts of
                g++ -O2, g++ -O3 and clang++ -O2 (tools/instruction-counts); before it, the
                multi-rail tests of the g++ build in a tools/softroce --rails 2 run (suite multirail)
  nodes         2 VMs, then 3, on a virtual switch (tools/softroce --nodes N): rdma-core's
                programs and rdmacxx over MPI and PMIx across the wire, then the faults
                (tools/nodes-wire); then 2 VMs with 2 rails each (--rails 2): a multi-rail
                connection across them, its faults on node 2's links (tests/mpi/multirail_test.cpp)
  lint          clang-format, clang-tidy on the examples, doxygen (warnings are errors),
                shellcheck on the shell scripts

The builds (build-check-NAME): gcc and clang (-O2, every test, example and tool, -Werror), asan
(g++ -O1, ASan+UBSan, the unit and device tests) and release (g++ -O3 as users' release builds:
examples, benchmarks, the instruction-count program). A device test that finds no device fails;
nothing is skipped.

The last line is "N passed, N failed", counting doctest test cases plus the checks that are whole
programs (a build, a header, an example pair, a consumer); before it, each stage's time. The exit
status is non-zero on any failure.

A full run (no --suite) keeps both cores busy in two lanes: the main lane makes the g++ build,
then runs the VM suites (nodes, then device) while a background lane, at the lowest CPU priority
(nice 19) so that it takes only what the VMs leave idle, makes the other builds and the consumers,
then runs the compile-only and host suites. The device suite waits for the builds it runs. The
stage table names each stage's lane.

Builds go through ccache when it is installed (tools/setup installs it), with the cache outside
the tree: $CCACHE_DIR, else /var/cache/rdmacxx/ccache (~/.cache/rdmacxx/ccache for a user who
cannot write there). The check passes without it; CHECK_NO_CCACHE=1 turns it off.

Environment: CHECK_ONLY=gcc makes only the g++ build (a quicker local run); CHECK_SERIAL=1 runs
every suite in one lane, one after the other.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from . import builds
from .proc import run
from .suites import SUITES, Context, device_part
from .tally import Tally

# The full run's lanes: the VM suites in the main lane; first the builds they need and the
# consumers, then the compile-only and host suites, in the background lane.
VM_SUITES = ("nodes", "device")
BACKGROUND_FIRST_BUILDS = ("asan", "clang", "release")
BACKGROUND_FIRST_SUITES = ("consumers",)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line; an unknown suite is a usage error (exit 2)."""
    parser = argparse.ArgumentParser(
        prog="tools/check", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", action="append", choices=list(SUITES), metavar="NAME",
                        help="run only this suite (repeatable); default: all")
    parser.add_argument("--list", action="store_true", help="list the suites and exit")
    # The lanes of a full run: a background lane is tools/check run again with these.
    parser.add_argument("--build", action="append", choices=list(builds.BUILDS), default=[],
                        help=argparse.SUPPRESS)
    parser.add_argument("--built", action="append", choices=list(builds.BUILDS), default=[],
                        help=argparse.SUPPRESS)
    parser.add_argument("--no-setup", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def builds_for(suites: list[str], only_gcc: bool, extra: tuple[str, ...] = ()) -> list[tuple[str, bool]]:
    """(build, made in full) for each build the suites need, in the order they are made; a
    build that the suites only read (meson test, a compile database) is only configured. Only
    gcc with CHECK_ONLY=gcc."""
    full = {b for s in suites for b in SUITES[s].needs} | set(extra)
    configured = {b for s in suites for b in SUITES[s].configures}
    order = [(b, b in full) for b in builds.BUILDS if b in full | configured]
    return [(b, f) for b, f in order if b == "gcc"] if only_gcc else order


def make_builds(top: Path, tally: Tally, wanted: list[tuple[str, bool]]) -> list[str]:
    """Configures (and, when wanted in full, builds) each build; the ones that succeeded."""
    made = []
    for name, full in wanted:
        build = builds.BUILDS[name]
        with tally.stage(f"build: {name}" if full else f"configure: {name}"):
            log = Path(f"/var/tmp/rdmacxx-configure-{name}.log")
            if builds.configure(top, build, log) and (not full or builds.make(top, build)):
                tally.ok(f"build {name}")
                made.append(name)
            else:
                if log.exists():
                    print("\n".join(log.read_text(errors="replace").splitlines()[-20:]))
                tally.bad(f"build {name}")
    return made


def run_suites(ctx: Context, chosen: list[str], only_gcc: bool) -> None:
    """Runs the suites in order; one whose builds failed counts as one failure."""
    for name in chosen:
        suite = SUITES[name]
        missing = [b for b in suite.needs + suite.configures
                   if b not in ctx.made and not (only_gcc and b != "gcc")]
        with ctx.tally.stage(name):
            print(suite.title, flush=True)
            if missing:
                ctx.tally.bad(f"{name} (builds failed: {', '.join(missing)})")
                continue
            suite.run(ctx)


class Background:
    """tools/check run again at nice 19 for some builds and suites; its output goes to a file
    and is printed, with its report merged, when it is joined."""

    def __init__(self, top: Path, name: str, suites: list[str], extra_builds: list[str],
                 built: list[str]):
        self.name = name
        self.folder = Path(tempfile.mkdtemp(prefix=f"rdmacxx-check-{name}-", dir="/var/tmp"))
        self.log = self.folder / "output.log"
        self.report = self.folder / "report.json"
        cmd = ["nice", "-n", "19", str(top / "tools" / "check"), "--no-setup",
               "--report", str(self.report)]
        cmd += [a for s in suites for a in ("--suite", s)]
        cmd += [a for b in extra_builds for a in ("--build", b)]
        cmd += [a for b in built for a in ("--built", b)]
        with self.log.open("w") as out:
            self.process = subprocess.Popen(cmd, cwd=top, stdout=out, stderr=subprocess.STDOUT)

    def join(self, tally: Tally) -> None:
        status = self.process.wait()
        print(f"\n== background lane: {self.name} (nice 19, beside the main lane)")
        print(self.log.read_text(errors="replace"), flush=True)
        if not tally.merge(self.report, "background"):
            tally.bad(f"background lane {self.name} (no report, exit {status})")
        for f in self.folder.iterdir():
            f.unlink()
        self.folder.rmdir()


def use_ccache(top: Path) -> None:
    """Sets up ccache for the builds when it is there: the cache outside the tree, and paths
    under the tree hashed as relative ones, so that another clone of the same sources (CI's)
    finds what this one compiled."""
    if os.environ.get("CHECK_NO_CCACHE") == "1":
        os.environ["CCACHE_DISABLE"] = "1"
        return
    if "CCACHE_DIR" not in os.environ:
        system = Path("/var/cache/rdmacxx/ccache")
        try:
            system.mkdir(parents=True, exist_ok=True)
            os.environ["CCACHE_DIR"] = str(system) if os.access(system, os.W_OK) else ""
        except OSError:
            os.environ["CCACHE_DIR"] = ""
        if not os.environ["CCACHE_DIR"]:
            os.environ["CCACHE_DIR"] = str(Path.home() / ".cache" / "rdmacxx" / "ccache")
    os.environ.setdefault("CCACHE_MAXSIZE", "8G")
    os.environ.setdefault("CCACHE_BASEDIR", str(top))
    # The sanitizer build has line tables (-g1): without this, ccache hashes the build folder's
    # absolute path into them and another clone misses every unit.
    os.environ.setdefault("CCACHE_NOHASHDIR", "1")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.list:
        for s in SUITES.values():
            print(f"{s.name:13} {s.title}")
        return 0
    top = Path(__file__).resolve().parents[3]
    os.chdir(top)
    use_ccache(top)
    tally = Tally()
    only_gcc = os.environ.get("CHECK_ONLY") == "gcc"
    # Every suite runs in the table's order, whatever the order of the flags.
    chosen = [s for s in SUITES if s in (args.suite or list(SUITES))]

    if not args.no_setup:
        with tally.stage("setup"):
            if run(["tools/setup"], top, limit=1800).returncode != 0:
                tally.bad("setup")
                print(tally.summary())
                return 1

    lanes = not args.suite and not args.build and not args.built and os.environ.get("CHECK_SERIAL") != "1"
    if lanes:
        run_in_lanes(top, tally, chosen, only_gcc)
    else:
        wanted = [(b, full) for b, full in builds_for(chosen, only_gcc, tuple(args.build))
                  if b not in args.built]
        made = args.built + make_builds(top, tally, wanted)
        run_suites(Context(top, made, tally), chosen, only_gcc)
    if args.report:
        tally.save(args.report)
    print(tally.summary(final=not args.report))
    return 0 if tally.failed == 0 else 1


def run_in_lanes(top: Path, tally: Tally, chosen: list[str], only_gcc: bool) -> None:
    """The full run. Main lane: the g++ build, then the VM suites: nodes, the device programs
    that need only the g++ build, then (once the background builds are made) the rest of the
    device suite. Background lane (nice 19): the other builds and the consumers, then the
    compile-only and host suites beside the rest of the device suite."""
    made = make_builds(top, tally, [("gcc", True)])
    ctx = Context(top, made, tally)
    if "gcc" not in made:
        run_suites(ctx, [s for s in chosen if s not in VM_SUITES], only_gcc)
        return
    first_builds = [] if only_gcc else list(BACKGROUND_FIRST_BUILDS)
    first = Background(top, "builds", [s for s in chosen if s in BACKGROUND_FIRST_SUITES],
                       first_builds, made)
    run_suites(ctx, [s for s in chosen if s == "nodes"], only_gcc)
    if "device" in chosen:
        with tally.stage("device: the g++ build's programs"):
            device_part(ctx, "g++")
    with tally.stage("waiting for the background builds"):
        first.join(tally)
    ctx.made += [b for b in first_builds if (builds.BUILDS[b].folder(top) / "build.ninja").exists()
                 and f"build {b}" not in tally.failures]
    rest = [s for s in chosen if s not in VM_SUITES and s not in BACKGROUND_FIRST_SUITES]
    second = Background(top, "suites", rest, [], ctx.made) if rest else None
    if "device" in chosen:
        with tally.stage("device: the other builds' programs, the consumers"):
            missing = [b for b in SUITES["device"].needs
                       if b not in ctx.made and not (only_gcc and b != "gcc")]
            if missing:
                tally.bad(f"device (builds failed: {', '.join(missing)})")
            else:
                device_part(ctx, "others")
    if second:
        with tally.stage("waiting for the background suites"):
            second.join(tally)

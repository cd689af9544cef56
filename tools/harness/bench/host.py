"""On the host: build what the run needs, then the one tools/softroce run that makes the device run."""

import os
import shutil
import subprocess
import sys
import time

from harness.bench import cli
from harness.bench import env as envmod

RDMACXX_PERF = "benchmarks/perf/rdmacxx-perf"
BENCH = "benchmarks/bench"
BENCH_ASIO = "benchmarks/bench-asio"


def meson_setup(opts):
    """Meson's command configuring the release build in OPTS.build: with --nodes 2 the examples
    (rdmacxx-perf is one), else the benchmarks."""
    if opts.nodes == 2:
        options = ["-Dbuildtype=release", "-Dtests=disabled", "-Dexamples=enabled", "-Dbenchmarks=disabled"]
    else:
        options = ["-Dbenchmarks=enabled", "-Dbuildtype=release", "-Dtests=disabled", "-Dexamples=disabled"]
    return ["meson", "setup", opts.build, opts.top, *options]


def targets(opts, ninja_targets):
    """The ninja targets the run needs; NINJA_TARGETS is `ninja -t targets all`'s output (bench-asio
    is there only when Meson found Asio)."""
    wanted = [RDMACXX_PERF]
    if opts.rails == 2:
        wanted.append("examples/multirail_copy")
    if opts.suite and any(opts.has_group(g) for g in ("reg", "lat", "bw", "rate", "cq")):
        wanted.append(BENCH)
    if opts.suite and opts.has_group("asio") and any(
            line.startswith(BENCH_ASIO + ":") for line in ninja_targets.splitlines()):
        wanted.append(BENCH_ASIO)
    return wanted


def build(opts):
    """Configure (once) and build what the run needs; False when that failed."""
    if not os.path.isfile(os.path.join(opts.build, "build.ninja")):
        if subprocess.call(meson_setup(opts), stdout=subprocess.DEVNULL) != 0:
            print(f"bench: meson setup {opts.build} failed", file=sys.stderr)
            return False
    listing = subprocess.run(["ninja", "-C", opts.build, "-t", "targets", "all"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, check=False).stdout
    if subprocess.call(["ninja", "-C", opts.build, *targets(opts, listing)], stdout=subprocess.DEVNULL) != 0:
        print(f"bench: the build in {opts.build} failed (ninja -C {opts.build})", file=sys.stderr)
        return False
    return True


def softroce_command(opts):
    """The tools/softroce run whose command is this program again, with --inside, in the VM."""
    command = [os.path.join(opts.top, "tools", "softroce"), "--timeout", "7200"]
    if opts.nodes == 2:
        command += ["--nodes", "2"]
    if opts.rails == 2:
        command += ["--rails", "2"]
    return [*command, "--", os.path.join(opts.top, "tools", "bench"), *cli.inside_args(opts)]


def tee(argv, path, environ):
    """Run ARGV, its output (stdout and stderr) both to ours and into PATH; its exit status."""
    with open(path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environ)
        try:
            for line in iter(proc.stdout.readline, b""):
                sys.stdout.buffer.write(line)
                sys.stdout.flush()
                log.write(line)
        except KeyboardInterrupt:
            # Ctrl-C reached softroce too: let it power the VMs off before we go.
            for line in iter(proc.stdout.readline, b""):
                log.write(line)
        proc.stdout.close()
        return proc.wait()


def run(opts):
    """Build, then the device run into OPTS.out/runs (emptied first). The exit status: 0, or 1
    when the build or the device run failed."""
    if not build(opts):
        return 1
    shutil.rmtree(opts.runs, ignore_errors=True)
    os.makedirs(opts.runs)
    start = time.monotonic()
    with open(os.path.join(opts.runs, "host-load-before.txt"), "w") as f:
        f.write(envmod.loadavg())
    environ = dict(os.environ)
    if opts.nodes == 1:  # 1 GiB registrations need room (one VM); several nodes keep softroce's default
        environ["RDMACXX_SOFTROCE_MEMORY"] = environ.get("RDMACXX_SOFTROCE_MEMORY") or "4G"
    sys.stdout.flush()
    status = tee(softroce_command(opts), os.path.join(opts.runs, "softroce.txt"), environ)
    if status != 0:
        print(f"bench: the device run failed (exit {status})", file=sys.stderr)
        return 1
    print(f"bench: device run took {int(time.monotonic() - start)} s", flush=True)
    with open(os.path.join(opts.runs, "host-load-after.txt"), "w") as f:
        f.write(envmod.loadavg())
    return 0

"""The suites of tools/check. Each names the builds it needs and counts its checks in a Tally.

unit, compile-fail, headers and the device programs are Meson test suites (`meson test
--suite …`); fuzz, consumers, nodes, lint and the harness's own tests drive their tools.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import builds
from .proc import run
from .tally import Tally, read_testlog


@dataclass
class Context:
    """What every suite sees: the tree's top, the builds made, the tally."""

    top: Path
    made: list[str]  # the builds that were made (or already there), in order
    tally: Tally

    def folder(self, build: str) -> Path:
        return builds.BUILDS[build].folder(self.top)


def meson_test(ctx: Context, build: str, label: str, *selection: str, doctest: bool = False,
               logbase: str = "testlog") -> None:
    """`meson test` in one build for the selection (suites with --suite, or test names)."""
    folder = ctx.folder(build)
    log = folder / "meson-logs" / f"{logbase}.json"
    log.unlink(missing_ok=True)
    done = run(["meson", "test", "-C", str(folder), "--no-rebuild", "--logbase", logbase,
                *selection], ctx.top, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
               text=True)
    if not log.exists():
        print(done.stdout[-4000:])
        ctx.tally.bad(f"{label} (meson test wrote no log, exit {done.returncode})")
        return
    ctx.tally.meson_tests(label, read_testlog(log), doctest=doctest)


def suite_tools(ctx: Context) -> None:
    """The harness's own unit tests (tools/harness/tests: unittest, no device)."""
    done = run([sys.executable, "-m", "unittest", "discover", "-s", "harness/tests", "-t", "."],
               ctx.top / "tools", limit=300, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
               text=True)
    print(done.stdout[-3000:] if done.returncode else "\n".join(done.stdout.strip().splitlines()[-3:]))
    m = re.search(r"^Ran (\d+) tests?", done.stdout, re.MULTILINE)
    fails = re.search(r"FAILED \((?:failures=(\d+))?(?:, )?(?:errors=(\d+))?", done.stdout)
    if not m:
        ctx.tally.bad("harness unit tests (did not run)")
        return
    failed = sum(int(x) for x in fails.groups() if x) if fails else 0
    ctx.tally.ok("harness unit tests", int(m.group(1)) - failed)
    if failed or done.returncode:
        ctx.tally.bad("harness unit tests", max(failed, 1))


def suite_unit(ctx: Context) -> None:
    """The unit tests (no device) of every build that has them."""
    for b in ("gcc", "clang", "asan"):
        if b in ctx.made:
            meson_test(ctx, b, f"unit ({b})", "--suite", "unit", doctest=True)


def suite_compile_fail(ctx: Context) -> None:
    """Misuse must not compile, with its sentence (tests/compile_fail), under both compilers."""
    for b in ("gcc", "clang"):
        if b in ctx.made:
            meson_test(ctx, b, f"compile-fail ({b})", "--suite", "compile_fail")


def suite_headers(ctx: Context) -> None:
    """Every public header compiles on its own, under both compilers."""
    for b in ("gcc", "clang"):
        if b in ctx.made:
            meson_test(ctx, b, f"headers ({b})", "--suite", "headers")


def suite_fuzz(ctx: Context) -> None:
    """One libFuzzer target per parser (tools/fuzz), 6 s each."""
    done = run(["tools/fuzz", "6"], ctx.top, limit=900, stdout=subprocess.PIPE,
               stderr=subprocess.STDOUT, text=True)
    ran = False
    for line in done.stdout.splitlines():
        print(line)
        if line.startswith("PASS "):
            ctx.tally.ok("fuzz")
            ran = True
        elif line.startswith("FAIL "):
            ctx.tally.bad(f"fuzz {line[5:]}")
            ran = True
    if not ran:
        ctx.tally.bad("fuzz (did not run)")


def suite_consumers(ctx: Context) -> None:
    """The five ways users pull rdmacxx in, and a verbs-only program linked without librdmacm
    (tools/consumers); their programs run on the device."""
    failures = run(["tools/consumers", str(ctx.top / "build-check-consumers")], ctx.top,
                   limit=900).returncode
    if failures:
        ctx.tally.bad("consumer builds", failures)


def suite_device(ctx: Context) -> None:
    """One tools/softroce run of every device program (tools/harness/check/on_device.sh)."""
    device_part(ctx, "all")


def show_tests(tests: list, label: str) -> None:
    """Prints each meson test's name, result and the last 40 lines of its output (doctest's
    banner left out)."""
    for t in tests:
        tail = [ln for ln in t.output.splitlines()[-40:]
                if not re.match(r"^\[doctest\] (doctest version|run with)", ln)]
        print(f"--- {t.name} ({label}): {t.result}\n" + "\n".join(tail))


def multirail_part(ctx: Context) -> None:
    """The multi-rail tests of the g++ build (meson suite multirail) in one tools/softroce
    --rails 2 run: two devices, each on its own interface."""
    build = ctx.folder("gcc")
    log = build / "meson-logs" / "multirail.json"
    log.unlink(missing_ok=True)
    status = run(["tools/softroce", "--rails", "2", "--timeout", "900", "--", "meson", "test", "-C", str(build),
                  "--no-rebuild", "--num-processes", "1", "--logbase", "multirail", "--suite", "multirail"],
                 ctx.top, limit=1000).returncode
    if not log.exists():
        ctx.tally.bad(f"multirail tests did not run (softroce --rails 2 exit {status})")
        return
    tests = read_testlog(log)
    show_tests(tests, "gcc, 2 rails")
    ctx.tally.meson_tests("multirail gcc", tests, doctest=True)


def device_part(ctx: Context, part: str) -> None:
    """One tools/softroce run of on_device.sh's PART: all, g++ (what needs only the g++ build) or
    others (the rest); counts the doctest programs from meson's logs and the other programs
    from their status files."""
    logs = ctx.folder("gcc") / "device-logs"
    if part != "others":
        shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in logs.glob("*.status")}
    doctest_builds = {"all": ("gcc", "asan"), "g++": ("gcc",), "others": ("asan",)}[part]
    for b in doctest_builds:
        (ctx.folder(b) / "meson-logs" / "device.json").unlink(missing_ok=True)
    env = dict(os.environ, CHECK_BUILDS=" ".join(ctx.made))
    if part != "others" and "gcc" in ctx.made:
        multirail_part(ctx)
    status = run(["tools/softroce", "--timeout", "3000", "--", "bash",
                  "tools/harness/check/on_device.sh", str(logs),
                  str(ctx.top / "build-check-consumers"), part], ctx.top, limit=3100,
                 env=env).returncode
    if status:
        ctx.tally.bad(f"softroce (exit {status})")
    for b in doctest_builds:
        if b not in ctx.made:
            continue
        log = ctx.folder(b) / "meson-logs" / "device.json"
        if not log.exists():
            meson_log = logs / f"meson-device-{b}.log"
            if meson_log.exists():
                print(meson_log.read_text(errors="replace")[-3000:])
            ctx.tally.bad(f"device tests ({b}) did not run")
            continue
        tests = read_testlog(log)
        show_tests(tests, b)
        ctx.tally.meson_tests(f"device {b}", tests, doctest=True)
    for status_file in sorted(logs.glob("*.status")):
        if status_file.name in before:
            continue
        name = status_file.stem
        print(f"--- {name}")
        print((logs / f"{name}.log").read_text(errors="replace"))
        ctx.tally.check(name, status_file.read_text().strip() == "0")


def suite_nodes(ctx: Context) -> None:
    """2 VMs, then 3, on a virtual switch: rdma-core programs and rdmacxx across the wire."""
    gcc = ctx.folder("gcc")
    logs = gcc / "nodes-logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    for n in (2, 3):
        part = logs / str(n)
        args = ["--mpi-only", str(part)] if n == 3 else [str(part)]
        # Then rdmacxx itself across the wire (tools/nodes-wire, same logs): on 2 nodes the
        # examples, one-sided operations and the faults, node 2 powered off last; on 3 nodes mckey.
        cmd = ["tools/softroce", "--timeout", "900", "--nodes", str(n), "--", "bash", "-c",
               'b=$1 l=$2; shift 2; "$@"; tools/nodes-wire "$b" "$l"', "nodes-part",
               "build-check-gcc", str(part), "tools/nodes-selftest", *args, str(gcc)]
        with (logs / f"softroce-{n}.log").open("w") as out:
            status = run(cmd, ctx.top, limit=1000, stdout=out, stderr=subprocess.STDOUT).returncode
        text = (logs / f"softroce-{n}.log").read_text(errors="replace")
        for line in text.splitlines():
            if re.match(r"^softroce: ([0-9]+ nodes up|.*(failed|stopped|timed out))", line):
                print(line)
        if status:
            ctx.tally.bad(f"softroce --nodes {n} (exit {status})")
        statuses = sorted(part.glob("*.status"))
        if not statuses:
            print("\n".join(text.splitlines()[-30:]))
            ctx.tally.bad(f"nodes-selftest on {n} nodes (did not run)")
        for st in statuses:
            log = (part / f"{st.stem}.log").read_text(errors="replace")
            if st.read_text().strip() == "0":
                ctx.tally.ok(st.stem)
                last = log.strip().splitlines()[-1] if log.strip() else ""
                print(f"passed: {st.stem} ({last})")
            else:
                print(f"--- {st.stem}\n{log}")
                ctx.tally.bad(f"{st.stem} ({n} nodes)")
    multirail_across(ctx, logs)
    figures = []
    for f in sorted((logs / "2").glob("fault_*.log")):
        for line in f.read_text(errors="replace").splitlines():
            if line.startswith("loss 5 % both ways"):
                figures.append(line)
            m = re.search(r"MESSAGE: ((link|poweroff|kill): .*(after the last ACKed|flushed .* after).*)",
                          line)
            if m:
                figures.append(m.group(1))
    print("\n".join(figures))


def multirail_across(ctx: Context, logs: Path) -> None:
    """A multi-rail connection across 2 nodes with 2 rails each (tools/softroce --nodes 2
    --rails 2): tests/mpi/multirail_test.cpp under mpirun, one rank per node, the faults made on
    node 2's links. One check; its figures printed."""
    gcc = ctx.folder("gcc")
    program = gcc / "tests" / "mpi_multirail_tests"
    if not program.exists():
        ctx.tally.bad("mpi_multirail_tests was not built")
        return
    log = logs / "multirail_across.log"
    script = ('timeout 700 mpirun --allow-run-as-root -H 198.18.0.1,198.18.0.2 -np 2 --mca pml ob1 '
              '--mca btl self,tcp --mca btl_tcp_if_include eth0 "$1"')
    with log.open("w") as out:
        status = run(["tools/softroce", "--timeout", "900", "--nodes", "2", "--rails", "2", "--", "bash", "-c",
                      script, "multirail", str(program)], ctx.top, limit=1000, stdout=out,
                     stderr=subprocess.STDOUT).returncode
    text = log.read_text(errors="replace")
    for line in text.splitlines():
        if "MESSAGE:" in line or re.match(r"^softroce: ([0-9]+ nodes up|.*(failed|stopped|timed out))", line):
            print(line)
    if status == 0:
        ctx.tally.ok("multirail_across_2_nodes_2_rails")
    else:
        print("\n".join(text.splitlines()[-60:]))
        ctx.tally.bad(f"multirail_across_2_nodes_2_rails (exit {status})")


def _parallel(cmds: list[list[str]], top: Path) -> list[tuple[list[str], int, str]]:
    """Runs the commands, as many at once as there are cores; (command, status, output) each."""
    from concurrent.futures import ThreadPoolExecutor

    def one(cmd: list[str]) -> tuple[list[str], int, str]:
        done = run(cmd, top, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return cmd, done.returncode, done.stdout

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(one, cmds))


def suite_lint(ctx: Context) -> None:
    """clang-format (no change wanted), clang-tidy on the examples, doxygen warnings as errors."""
    top = ctx.top
    sources = run(["git", "ls-files", "include/*.hpp", "tests/*.cpp", "tests/*.hpp",
                   "examples/*.cpp", "examples/*.hpp", "benchmarks/*.cpp", "benchmarks/*.hpp"],
                  top, stdout=subprocess.PIPE, text=True).stdout.split()
    fmt = run(["clang-format", "--dry-run", "--Werror", *sources], top, stdout=subprocess.PIPE,
              stderr=subprocess.STDOUT, text=True)
    if not ctx.tally.check("clang-format", fmt.returncode == 0):
        print("\n".join(fmt.stdout.splitlines()[:40]))
        print("run: clang-format -i $(git ls-files '*.hpp' '*.cpp')")
    db = ctx.folder("clang")
    if not (db / "compile_commands.json").exists():
        db = ctx.folder("gcc")
    examples = sorted(str(p.relative_to(top)) for p in (top / "examples").glob("*.cpp"))
    bad = 0
    for cmd, status, out in _parallel([["clang-tidy", "-p", str(db), "--quiet", f]
                                       for f in examples], top):
        out = "\n".join(ln for ln in out.splitlines()
                        if not re.match(r"^[0-9]+ warnings? generated", ln))
        if not ctx.tally.check(f"clang-tidy {cmd[-1]}", status == 0):
            bad += 1
            print(f"clang-tidy {cmd[-1]}\n{out}")
    print(f"clang-tidy: {len(examples)} files, {bad} failed")
    with open("/var/tmp/rdmacxx-doxygen.log", "w") as log:
        dox = run(["doxygen", "docs/Doxyfile"], top, stdout=log, stderr=subprocess.STDOUT)
    if not ctx.tally.check("doxygen", dox.returncode == 0):
        print("\n".join(Path("/var/tmp/rdmacxx-doxygen.log").read_text().splitlines()[:40]))
    shellcheck = run(["shellcheck", "-S", "warning", *shell_files(top)], top)
    ctx.tally.check("shellcheck", shellcheck.returncode == 0)


def shell_files(top: Path) -> list[str]:
    """The tree's shell scripts: tracked files whose first line names bash or sh."""
    names = run(["git", "ls-files", "tools", "tests", ".ci"], top, stdout=subprocess.PIPE,
                text=True).stdout.split()
    found = []
    for name in names:
        path = top / name
        if path.suffix == ".sh":
            found.append(name)
            continue
        try:
            with path.open("rb") as f:
                first = f.readline(100)
        except OSError:
            continue
        if re.match(rb"^#!.*\b(bash|sh)\b", first):
            found.append(name)
    return found


@dataclass(frozen=True)
class Suite:
    """A suite: its name, the builds it needs (all of them made unless CHECK_ONLY=gcc), its run."""

    name: str
    needs: tuple[str, ...]
    run: Callable[[Context], None]
    title: str
    configures: tuple[str, ...] = ()  # builds it needs configured only (meson test, a compile db)


SUITES: dict[str, Suite] = {
    s.name: s
    for s in [
        Suite("tools", (), suite_tools, "the harness's own unit tests (tools/harness/tests)"),
        Suite("headers", (), suite_headers,
              "every public header compiles on its own (g++, clang++)", ("gcc", "clang")),
        Suite("unit", ("gcc", "clang", "asan"), suite_unit, "unit tests (no device)"),
        Suite("compile-fail", (), suite_compile_fail,
              "compile-fail tests (g++, clang++): misuse must not compile, with its sentence",
              ("gcc", "clang")),
        Suite("fuzz", (), suite_fuzz, "fuzz: one libFuzzer target per parser (6 s each)"),
        Suite("consumers", (), suite_consumers,
              "consumer projects: the five ways users pull rdmacxx in, and verbs without librdmacm"),
        Suite("device", ("gcc", "clang", "asan", "release"), suite_device,
              "on a real RDMA device (tools/softroce): device tests, examples, consumers, "
              "instruction counts"),
        Suite("nodes", ("gcc",), suite_nodes,
              "several nodes (tools/softroce --nodes 2 and 3): rdma-core programs and rdmacxx "
              "over MPI and PMIx across the wire"),
        Suite("lint", (), suite_lint, "lint: clang-format, clang-tidy, doxygen, shellcheck",
              ("clang",)),
    ]
}

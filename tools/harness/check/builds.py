"""The builds tools/check makes: which compiler, which Meson options, which targets.

Each build lives in build-check-NAME/ at the top of the tree and is configured once (a folder
with a build.ninja is reused). No debug information in the -O2 builds: it costs a quarter of
the compile time and the check never debugs. The sanitizer build at -O1 with line tables (-g1)
compiles in half the time of -O2 -g and its reports still name file and line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .proc import run

_COMMON = ["--werror", "-Dtests=enabled", "-Dexamples=enabled", "-Dbenchmarks=disabled",
           "-Dmpi=enabled", "-Dpmix=enabled", "-Ddebug=false"]


@dataclass(frozen=True)
class Build:
    """One build folder: its compiler, Meson options, and the targets the check needs of it."""

    name: str
    cxx: str
    options: list[str]
    purpose: str
    # Ninja targets; empty means all. A callable picks them from the configured build.
    targets: list[str] = field(default_factory=list)
    target_pattern: str | None = None

    def folder(self, top: Path) -> Path:
        return top / f"build-check-{self.name}"


BUILDS: dict[str, Build] = {
    b.name: b
    for b in [
        Build("gcc", "g++", _COMMON,
              "g++ -O2: every test, example and tool; runs the device and multi-node tests"),
        # clang's warnings come from its front end, whatever the optimisation level: -O0 compiles
        # in less than half the time of -O2. The instruction-count program is still made at -O2.
        Build("clang", "clang++", _COMMON + ["-Doptimization=0"],
              "clang++ -O0: every test, example and tool, -Werror; runs the unit tests"),
        Build("asan", "g++", _COMMON + [
            "-Doptimization=1", "-Db_sanitize=address,undefined", "-Db_lundef=false",
            "-Dcpp_args=-g1 -fno-sanitize-recover=all",
            "-Dcpp_link_args=-fno-sanitize-recover=all"],
            "g++ -O1 ASan+UBSan: the unit and device tests, the Asio adapter's cancellation race",
            targets=["tests/unit_tests", "tests/device_tests"], target_pattern=r"^tests/asio_race_tests$"),
        Build("release", "g++", ["--werror", "-Dtests=enabled", "-Dexamples=enabled",
                                 "-Dbenchmarks=enabled", "-Dbuildtype=release"],
              "g++ -O3, as users' release builds: benchmarks, rdmacxx-perf, instruction counts",
              targets=["tests/instructions"],
              target_pattern=r"^benchmarks/(bench|bench-asio|perf/rdmacxx-perf)$"),
    ]
}


def configure(top: Path, build: Build, log: Path) -> bool:
    """meson setup of the build's folder, unless it is configured already; output in log."""
    folder = build.folder(top)
    if (folder / "build.ninja").exists():
        return True
    cxx = build.cxx
    if shutil.which("ccache") and os.environ.get("CCACHE_DISABLE") != "1":
        cxx = f"ccache {cxx}"  # the cache is outside the tree (tools/check sets CCACHE_DIR)
    env = dict(os.environ, CXX=cxx)
    with log.open("w") as out:
        done = run(["meson", "setup", str(folder), *build.options], top, limit=600, env=env,
                   stdout=out, stderr=subprocess.STDOUT)
    return done.returncode == 0


def ninja_targets(top: Path, build: Build) -> list[str]:
    """The targets to build: the build's list plus those of its pattern (none: everything)."""
    wanted = list(build.targets)
    if build.target_pattern:
        listing = subprocess.run(["ninja", "-C", str(build.folder(top)), "-t", "targets", "all"],
                                 capture_output=True, text=True, check=True).stdout
        pattern = re.compile(build.target_pattern)
        for line in listing.splitlines():
            target = line.split(":", 1)[0]
            if pattern.match(target):
                wanted.append(target)
    return wanted


def make(top: Path, build: Build) -> bool:
    """ninja on the build's targets; ninja's output goes to stdout."""
    wanted = ninja_targets(top, build)
    done = run(["ninja", "-C", str(build.folder(top)), *wanted], top, limit=3600)
    return done.returncode == 0

"""What tools/check counts: passed and failed checks, the failures' names, each stage's time.

A check is a doctest test case, or a whole program that passes or fails (a build, an example
pair, a consumer, a header compiled alone). The last line printed is "N passed, N failed".
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

_DOCTEST_SUMMARY = re.compile(
    r"^\[doctest\] test cases:\s*(\d+)\s*\|\s*(\d+) passed\s*\|\s*(\d+) failed", re.MULTILINE)


def doctest_counts(output: str) -> tuple[int, int] | None:
    """(passed, failed) test cases from a doctest program's output; None without a summary."""
    found = _DOCTEST_SUMMARY.findall(output)
    if not found:
        return None
    _, passed, failed = found[-1]
    return int(passed), int(failed)


def failed_cases(output: str) -> str:
    """The blocks of a doctest program's output that report a failure, then what follows the
    last block (the summary, or a crash's report)."""
    blocks = re.split(r"^={20,}$", output, flags=re.MULTILINE)
    bad = [b.strip("\n") for b in blocks if re.search(r"\b(ERROR|FATAL ERROR|CRASHED)\b", b)]
    tail = "\n".join(blocks[-1].strip("\n").splitlines()[-30:])  # the summary, or a crash
    return "\n=====\n".join(bad[:20] + [tail])


def failed_case_lines(output: str, limit: int = 4) -> list[str]:
    """For the closing summary: each failed test case's name and its first error line (at most
    `limit`, each line cut to 240 characters), so the tail of a run names what failed."""
    lines = []
    for block in re.split(r"^={20,}$", output, flags=re.MULTILINE):
        error = re.search(r"^.*\b(?:ERROR|FATAL ERROR|CRASHED)\b.*$", block, re.MULTILINE)
        if not error:
            continue
        case = re.search(r"^TEST CASE:\s*(.*)$", block, re.MULTILINE)
        name = case.group(1).strip() if case else "?"
        lines.append(f"{name}: {error.group(0).strip()}"[:240])
    return lines[:limit]


@dataclass
class MesonTest:
    """One test of a `meson test` run, as meson-logs/testlog.json records it."""

    name: str
    result: str  # OK, FAIL, EXPECTEDFAIL, UNEXPECTEDPASS, SKIP, TIMEOUT, ERROR
    duration: float
    output: str

    @property
    def ok(self) -> bool:
        return self.result in ("OK", "EXPECTEDFAIL")


def read_testlog(path: Path) -> list[MesonTest]:
    """The tests of a `meson test` run's testlog.json (one JSON object per line)."""
    tests = []
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        output = (entry.get("stdout") or "") + (entry.get("stderr") or "")
        tests.append(MesonTest(entry["name"], entry["result"], float(entry.get("duration", 0)),
                               output))
    return tests


@dataclass
class Tally:
    """Passed and failed checks, and the time of each stage, for the closing summary."""

    passed: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)
    # (stage, seconds, lane): the lane is "main", or "background" for a stage that ran beside
    # the main lane's (at the lowest CPU priority).
    stages: list[tuple[str, float, str]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    lane: str = "main"

    def ok(self, name: str, count: int = 1) -> None:
        del name
        self.passed += count

    def bad(self, name: str, count: int = 1) -> None:
        self.failed += count
        self.failures.append(name)

    def check(self, name: str, passed: bool) -> bool:
        (self.ok if passed else self.bad)(name)
        return passed

    def doctest(self, name: str, output: str, status: int) -> None:
        """Counts a doctest program's test cases; a run without its summary (a crash) fails once."""
        counts = doctest_counts(output)
        if counts is None:
            self.bad(f"{name} (no doctest summary, exit {status})")
            return
        passed, failed = counts
        self.ok(name, passed)
        if failed:
            cases = "".join(f"\n  {line}" for line in failed_case_lines(output))
            self.bad(f"{name} ({failed} test cases){cases}", failed)
        elif status != 0:
            self.bad(f"{name} (exit {status})")

    def meson_tests(self, label: str, tests: list[MesonTest], doctest: bool = False) -> None:
        """Counts a `meson test` run: each test once, or a doctest program by its test cases."""
        if not tests:
            self.bad(f"{label} (no test ran)")
            return
        bad = 0
        for t in tests:
            if doctest:
                status = 0 if t.ok else 1
                self.doctest(f"{t.name} ({label})", t.output, status)
                if not t.ok:
                    print(failed_cases(t.output))
                continue
            if t.ok:
                self.ok(t.name)
            else:
                bad += 1
                print(f"--- {t.name}: {t.result}\n{t.output[-4000:]}")
                self.bad(f"{label}: {t.name} ({t.result})")
        if not doctest:
            print(f"{label}: {len(tests)} tests, {bad} failed")

    @contextlib.contextmanager
    def stage(self, title: str) -> Iterator[None]:
        """Prints the stage's title, then its time when it ends, and records the time."""
        print(f"\n== {title}", flush=True)
        start = time.monotonic()
        try:
            yield
        finally:
            took = time.monotonic() - start
            self.stages.append((title, took, self.lane))
            print(f"-- took {took:.0f} s", flush=True)

    def save(self, path: Path) -> None:
        """Writes the counts, failures and stages as JSON (a background lane's report)."""
        path.write_text(json.dumps({"passed": self.passed, "failed": self.failed,
                                    "failures": self.failures, "stages": self.stages}))

    def merge(self, path: Path, lane: str) -> bool:
        """Adds a background lane's saved report; False when there is none."""
        try:
            other = json.loads(path.read_text())
        except (OSError, ValueError):
            return False
        self.passed += other["passed"]
        self.failed += other["failed"]
        self.failures += other["failures"]
        self.stages += [(t, s, lane) for t, s, _ in other["stages"]]
        return True

    def summary(self, final: bool = True) -> str:
        """The closing lines: failures, the stage table, the total, "N passed, N failed" (a
        background lane, not final, words its count otherwise: only the run's last line has that
        form)."""
        lines = [""]
        lines += [f"failed: {f}" for f in self.failures]
        if self.stages:
            width = max(len(t) for t, _, _ in self.stages)
            lines.append(f"{'stage':<{width}}  {'s':>5}  lane")
            lines += [f"{t:<{width}}  {s:5.0f}  {lane}" for t, s, lane in self.stages]
        lines.append(f"tools/check took {time.monotonic() - self.started:.0f} s")
        if final:
            lines.append(f"{self.passed} passed, {self.failed} failed")
        else:
            lines.append(f"this lane counted {self.passed} checks that passed and {self.failed} that failed")
        return "\n".join(lines)

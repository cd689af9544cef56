"""Fakes for softroce's tests: QEMU and vde_switch processes that do what a test tells them,
with no VM, and a boot-files cache in a temporary folder."""

from __future__ import annotations

import io
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

from harness.softroce import kernel, nodes
from harness.softroce.common import SIGNALS
from harness.softroce.kernel import BootFiles

_real_sleep = time.sleep


class FakeProcess:
    """A Popen look-alike. stdout is a real pipe: the console thread reads what the fake
    wrote. It runs until stopped (terminate: status 143, like QEMU under timeout(1)), unless
    a test made it exit by itself (exit_status)."""

    def __init__(self, args: list[str], lines: list[bytes] = (),
                 exit_status: int | None = None) -> None:
        self.args = args
        self.pid = 1 << 22  # no such process: killpg on it fails harmlessly
        self.returncode: int | None = None
        self.terminated = False
        self.waited = False
        read_end, self._write_end = os.pipe()
        self.stdout = open(read_end, "rb")
        for line in lines:
            os.write(self._write_end, line + b"\n")
        if exit_status is not None:
            self._exit(exit_status)

    def _exit(self, status: int) -> None:
        if self.returncode is None:
            self.returncode = status
            os.close(self._write_end)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.waited = True
        assert self.returncode is not None, "waiting for a fake that runs forever"
        return self.returncode

    def terminate(self) -> None:
        self.terminated = True
        self._exit(143)

    def kill(self) -> None:
        self._exit(137)


def node_of(args: list[str]) -> int:
    append = args[args.index("-append") + 1]
    m = re.search(r"softroce_node=(\d+)", append)
    return int(m.group(1)) if m else 1


def run_of(args: list[str]) -> Path:
    append = args[args.index("-append") + 1]
    return Path(re.search(r"softroce_run=(\S+)", append).group(1))


class Behaviour:
    """What each fake QEMU does, by node: a function (run folder, node) -> (console lines,
    exit status or None to run until stopped); by default a node comes up and node 1 runs
    a command that exits 0."""

    def __init__(self) -> None:
        self.by_node: dict[int, Callable[[Path, int], tuple[list[bytes], int | None]]] = {}

    def __call__(self, run: Path, node: int) -> tuple[list[bytes], int | None]:
        if node in self.by_node:
            return self.by_node[node](run, node)
        return command_ran(0)(run, node)


def command_ran(status: int, output: list[bytes] = (b"hello",)) -> Callable:
    """Node 1 ran the command, which exited STATUS; other nodes come up and stay up."""
    def behave(run: Path, node: int) -> tuple[list[bytes], int | None]:
        nonce = run.name.encode()
        if node != 1:
            (run / f"ready.{node}").touch()
            return [b"boot noise", b"@@softroce:" + nonce + b":ready@@"], None
        (run / "status").write_text(f"{status}\n")
        return ([b"boot noise\r", b"@@softroce:" + nonce + b":begin@@", *output,
                 b"@@softroce:" + nonce + b":end:" + str(status).encode() + b"@@"], 0)
    return behave


def runs_forever(run: Path, node: int) -> tuple[list[bytes], int | None]:
    """Comes up (node 1 begins its command) and never ends by itself."""
    nonce = run.name.encode()
    if node != 1:
        (run / f"ready.{node}").touch()
        return [b"@@softroce:" + nonce + b":ready@@"], None
    return [b"@@softroce:" + nonce + b":begin@@", b"working"], None


class VmTestCase(unittest.TestCase):
    """Sets up a cache folder, fake QEMU and vde_switch processes (self.processes), fake
    ssh keys, and captures stdout and stderr (self.out, self.err)."""

    def setUp(self) -> None:
        stack = ExitStack()
        self.addCleanup(stack.close)
        self.tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(dir="/var/tmp")))
        (self.tmp / "runs").mkdir()
        self.boot = BootFiles(self.tmp, "6.1.0-99-amd64", self.tmp / "kernel",
                              self.tmp / "initrd.img")
        self.behaviour = Behaviour()
        self.processes: list[FakeProcess] = []
        self.switches: list[FakeProcess] = []
        self.popen_error: dict[int, Exception] = {}
        self.seen: dict[int, list[str]] = {}  # the run folder when node K's QEMU started
        self.cmd_sh = ""
        stack.enter_context(mock.patch.object(subprocess, "Popen", self.fake_popen))
        stack.enter_context(mock.patch.object(nodes, "keygen", self.fake_keygen))
        stack.enter_context(mock.patch.object(nodes, "check_tools", lambda: None))
        stack.enter_context(mock.patch.object(time, "sleep", self.tick))
        self.out = io.BytesIO()
        stack.enter_context(mock.patch.object(sys, "stdout", io.TextIOWrapper(self.out)))
        self.err = io.StringIO()
        stack.enter_context(mock.patch.object(sys, "stderr", self.err))
        self.on_tick: Callable[[], None] | None = None
        SIGNALS.reset()
        self.addCleanup(SIGNALS.reset)

    def tick(self, seconds: float) -> None:
        """time.sleep in the wait loops: a test's hook, then a short real sleep so the
        console threads get to read."""
        if self.on_tick:
            hook, self.on_tick = self.on_tick, None
            hook()
        _real_sleep(0.001)

    def fake_popen(self, args: list[str], **kwargs) -> FakeProcess:
        """QEMU (under timeout) and vde_switch are fakes; nothing else may start."""
        if args[0] == "vde_switch":
            return self.fake_switch(args, **kwargs)
        return self.fake_qemu(args, **kwargs)

    def fake_qemu(self, args: list[str], **_kwargs) -> FakeProcess:
        assert args[:4] == ["timeout", "-k", "5", args[3]] and args[4] == "qemu-system-x86_64"
        node = node_of(args)
        if node in self.popen_error:
            raise self.popen_error[node]
        run = run_of(args)
        self.seen[node] = sorted(p.name for p in run.iterdir())
        if node == 1 and (run / "cmd.sh").exists():
            self.cmd_sh = (run / "cmd.sh").read_text()
        lines, status = self.behaviour(run, node)
        process = FakeProcess(args, lines, status)
        process.run = run
        self.processes.append(process)
        return process

    def fake_switch(self, args: list[str], **_kwargs) -> FakeProcess:
        assert args[0] == "vde_switch"
        folder = Path(args[args.index("-s") + 1])
        folder.mkdir()
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(folder / "ctl"))
        self.addCleanup(server.close)
        process = FakeProcess(args)
        self.addCleanup(process.stdout.close)  # a real vde_switch has no pipe to us
        self.switches.append(process)
        return process

    @staticmethod
    def fake_keygen(path: Path, comment: str) -> None:
        path.write_text("PRIVATE\n")
        Path(f"{path}.pub").write_text(f"ssh-ed25519 AAAAC3Nza {comment}\n")

    def assert_all_stopped(self) -> None:
        """No fake process left running, the run folders removed."""
        for process in self.processes + self.switches:
            self.assertIsNotNone(process.poll(), process.args)
        self.assertEqual(list((self.tmp / "runs").iterdir()), [])

    def stdout_text(self) -> str:
        sys.stdout.flush()
        return self.out.getvalue().decode()


def cache_env(test: unittest.TestCase, folder: Path) -> None:
    """kernel.prepare yields boot files in FOLDER without building anything."""
    boot = BootFiles(folder, "6.1.0-99-amd64", folder / "kernel", folder / "initrd.img")

    class Prepared:
        def __enter__(self) -> BootFiles:
            return boot

        def __exit__(self, *exc) -> None:
            return None

    patcher = mock.patch.object(kernel, "prepare", lambda deadline: Prepared())
    patcher.start()
    test.addCleanup(patcher.stop)

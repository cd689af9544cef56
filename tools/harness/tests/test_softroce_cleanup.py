"""Every way out of a run cleans up: VMs and the switch stopped, the run folder removed, on
success, failure, exception, timeout and signal. QEMU and vde_switch are fakes
(softroce_fakes); the host route runs real commands."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path
from unittest import mock

from harness.softroce import cli, nodes, routes, vm
from harness.softroce.common import (SIGNALS, Deadline, Exit, Interrupted, Options,
                                     TimedOut)

from .softroce_fakes import VmTestCase, cache_env, command_ran, runs_forever


def signal_self(signum: int):
    """A tick hook: SIGNUM to this process, as a Ctrl-C or kill would send it."""
    return lambda: os.kill(os.getpid(), signum)


class Handlers(unittest.TestCase):
    """Installs softroce's signal handlers for the test, the runner's back afterwards."""

    def setUp(self) -> None:
        super().setUp()
        saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        self.addCleanup(lambda: [signal.signal(s, h) for s, h in saved.items()])
        # A runner started in the background of a non-interactive shell inherits SIGINT ignored,
        # and softroce rightly leaves an ignored signal ignored: these tests send it themselves.
        for s in saved:
            signal.signal(s, signal.SIG_DFL)
        SIGNALS.reset()
        SIGNALS.install()


class OneVm(Handlers, VmTestCase):
    def run_one(self, command=("true",), deadline: Deadline | None = None) -> int:
        return vm.run_one(self.boot, Options(command=list(command)), deadline or Deadline(60))

    def test_command_status_and_output(self) -> None:
        self.behaviour.by_node[1] = command_ran(3, [b"line 1\r", b"line 2"])
        self.assertEqual(self.run_one(), 3)
        self.assertEqual(self.stdout_text(), "line 1\nline 2\n")
        self.assertEqual(self.seen[1], ["cmd.sh", "params"])
        self.assertTrue(self.cmd_sh.endswith("exec true\n"))
        self.assert_all_stopped()

    def test_vm_stops_before_the_command_ends(self) -> None:
        self.behaviour.by_node[1] = lambda run, node: ([b"Kernel panic"], 1)
        with self.assertRaises(Exit) as caught:
            self.run_one()
        self.assertEqual(caught.exception.status, 125)
        self.assertIn("softroce: the VM stopped before the command finished (qemu exit status 1)"
                      "; last console lines:\nKernel panic\n", self.err.getvalue())
        self.assert_all_stopped()

    def test_timeout(self) -> None:
        now = [0.0]
        deadline = Deadline(20, clock=lambda: now[0])
        self.behaviour.by_node[1] = runs_forever
        self.on_tick = lambda: now.__setitem__(0, 21.0) or self.processes[0]._exit(124)
        with self.assertRaises(TimedOut) as caught:
            self.run_one(deadline=deadline)
        self.assertEqual((caught.exception.status, caught.exception.message),
                         (124, "timed out after 20 s (--timeout); stopped the VM"))
        self.assertEqual(self.processes[0].args[:4], ["timeout", "-k", "5", "20"])
        self.assert_all_stopped()

    def test_signal(self) -> None:
        self.behaviour.by_node[1] = runs_forever
        self.on_tick = signal_self(signal.SIGTERM)
        with self.assertRaises(Interrupted) as caught:
            self.run_one()
        self.assertEqual(caught.exception.status, 143)
        self.assertTrue(self.processes[0].terminated)
        self.assertIn("softroce: interrupted (SIGTERM)", self.err.getvalue())
        self.assert_all_stopped()

    def test_qemu_cannot_start(self) -> None:
        self.popen_error[1] = FileNotFoundError("timeout")
        with self.assertRaises(FileNotFoundError):
            self.run_one()
        self.assert_all_stopped()


class SeveralNodes(Handlers, VmTestCase):
    def run_nodes(self, count: int, deadline: Deadline | None = None) -> int:
        return nodes.run_nodes(self.boot, Options(command=["true"], nodes=count, route="vm"),
                               deadline or Deadline(60))

    def assert_all_stopped(self) -> None:
        super().assert_all_stopped()
        self.assertEqual(len(self.switches), 1)
        self.assertTrue(self.switches[0].terminated)

    def test_success(self) -> None:
        self.assertEqual(self.run_nodes(3), 0)
        self.assertEqual([node_of(p) for p in self.processes], [3, 2, 1])
        self.assertEqual(self.stdout_text(), "hello\n")
        self.assertRegex(self.err.getvalue(), r"softroce: 3 nodes up in \d+\.\d s \(booted in "
                                              r"parallel; 1 CPU each\)\n")
        self.assertEqual([name for name in self.seen[1] if not name.startswith("console.")],
                         ["bin", "cmd.sh", "empty", "hosts", "params.1", "params.2", "params.3",
                          "ready.2", "ready.3", "ssh", "vde", "vde.in"])
        self.assertIn("export RDMACXX_NODE=1 RDMACXX_NODES=198.18.0.1,198.18.0.2,198.18.0.3 ",
                      self.cmd_sh)
        self.assertTrue(self.processes[0].terminated and self.processes[1].terminated)
        self.assert_all_stopped()

    def test_node_stops_before_it_is_up(self) -> None:
        self.behaviour.by_node[1] = runs_forever
        self.behaviour.by_node[2] = lambda run, node: ([b"IO-APIC + timer doesn't work"], 0)
        with self.assertRaises(Exit) as caught:
            self.run_nodes(2)
        self.assertEqual(caught.exception.status, 125)
        # (node 1's console thread may say "2 nodes up" in between: the fakes are fast)
        self.assertIn("softroce: node 2 stopped before it was up (qemu exit status 0); its last "
                      "console lines:\n", self.err.getvalue())
        self.assertIn("\n[node2] IO-APIC + timer doesn't work\n", self.err.getvalue())
        self.assert_all_stopped()

    def test_node_powered_off_later_is_only_reported(self) -> None:
        def powered_off(run: Path, node: int):
            (run / f"ready.{node}").touch()
            return [f"@@softroce:{run.name}:ready@@".encode(), b"sysrq: Power Off"], 0
        self.behaviour.by_node[1] = runs_forever
        self.behaviour.by_node[2] = powered_off

        def end_once_reported() -> None:
            # Node 1's command ends only after softroce reported node 2.
            if "powered off" in self.err.getvalue():
                (self.processes[1].run / "status").write_text("0\n")
                self.processes[1]._exit(0)
            else:
                self.on_tick = end_once_reported
        self.on_tick = end_once_reported
        self.assertEqual(self.run_nodes(2), 0)
        self.assertIn("softroce: node 2 powered off while the command runs (qemu exit status 0)",
                      self.err.getvalue())
        self.assertIn("[node2] sysrq: Power Off\n", self.stdout_text())
        self.assert_all_stopped()

    def test_exception_while_starting(self) -> None:
        self.popen_error[1] = OSError("no qemu")
        with self.assertRaises(OSError):
            self.run_nodes(3)
        self.assertEqual(len(self.processes), 2)
        self.assertTrue(all(p.terminated for p in self.processes))
        self.assert_all_stopped()

    def test_timeout(self) -> None:
        now = [0.0]
        self.behaviour.by_node[1] = runs_forever

        def expire() -> None:
            now[0] = 100.0
            for p in self.processes:
                p._exit(124)
        self.on_tick = expire
        with self.assertRaises(TimedOut) as caught:
            self.run_nodes(2, Deadline(30, clock=lambda: now[0]))
        self.assertEqual(caught.exception.message,
                         "timed out after 30 s (--timeout); stopped the VMs")
        self.assert_all_stopped()

    def test_signal_through_main(self) -> None:
        cache_env(self, self.tmp)
        self.behaviour.by_node[1] = runs_forever
        self.on_tick = signal_self(signal.SIGINT)
        self.assertEqual(cli.main(["--nodes", "2", "--", "sleep", "300"]), 130)
        self.assertIn("softroce: interrupted (SIGINT)\n", self.err.getvalue())
        self.assert_all_stopped()


def node_of(process) -> int:
    append = process.args[process.args.index("-append") + 1]
    return int(append.split("softroce_node=")[1].split()[0])


class HostRoute(Handlers):
    """run_here runs real commands (under timeout(1), as on a host with a device)."""

    def setUp(self) -> None:
        super().setUp()
        self.tmp = Path(tempfile.mkdtemp())
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", str(self.tmp)], check=False))
        patcher = mock.patch.object(sys, "stderr", io.StringIO())
        patcher.start()
        self.addCleanup(patcher.stop)
        # The commands' own stderr (timeout's "failed to run command") is not the test's.
        saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        self.addCleanup(lambda: (os.dup2(saved, 2), os.close(saved)))

    def run_here(self, script: str, deadline: Deadline | None = None) -> int:
        return routes.run_here("host", "mlx5_0", "10.1.2.3", Options(command=["sh", "-c", script]),
                               deadline or Deadline(60))

    def test_environment_and_status(self) -> None:
        out = self.tmp / "env"
        status = self.run_here(f'echo "$RDMACXX_SOFTROCE_ROUTE $RDMACXX_DEVICE $RDMACXX_ADDR" '
                               f'>{out}; exit 3')
        self.assertEqual((status, out.read_text()), (3, "host mlx5_0 10.1.2.3\n"))

    def test_not_found(self) -> None:
        self.assertEqual(routes.run_here("host", "d", "", Options(command=["no-such-cmd-x"]),
                                         Deadline(60)), 127)

    def test_timeout(self) -> None:
        with self.assertRaises(TimedOut):
            self.run_here("sleep 5", Deadline(1))

    def test_signal_stops_the_command(self) -> None:
        pidfile = self.tmp / "pid"
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        with self.assertRaises(Interrupted):
            self.run_here(f"echo $$ >{pidfile}; exec sleep 30")
        pid = int(pidfile.read_text())
        time.sleep(0.1)
        with self.assertRaises(ProcessLookupError):
            os.kill(pid, 0)

    def test_module_route_tears_down_on_every_exit(self) -> None:
        for outcome in (0, Interrupted(15), TimedOut(1, "the command")):
            calls = []

            def fake_run_here(*args, outcome=outcome):
                if isinstance(outcome, BaseException):
                    raise outcome
                return outcome
            with self.subTest(outcome=outcome), \
                    mock.patch.object(routes, "run_here", fake_run_here), \
                    mock.patch.object(routes, "quiet", lambda *c: calls.append(c) or True):
                try:
                    routes.run_module(Options(command=["true"]), Deadline(60))
                except Exit:
                    pass
                self.assertEqual(calls, [("rdma", "link", "delete", "rxe0"),
                                         ("ip", "link", "delete", "rxcxx0")])


if __name__ == "__main__":
    unittest.main()

"""softroce's command line: what parses, what is a usage error (exit 2), and how main turns
failures into exit statuses."""

from __future__ import annotations

import io
import os
import signal
import sys
import unittest
from unittest import mock

from harness.softroce import cli, routes
from harness.softroce.common import (SIGNALS, Interrupted, Options, SetupError, TimedOut,
                                     UsageError)


class ParseArgs(unittest.TestCase):
    def test_defaults(self) -> None:
        self.assertEqual(cli.parse_args(["--", "ibv_devices"]),
                         Options(command=["ibv_devices"], timeout=1800, nodes=1, route="auto",
                                 keep_going=False, verbose=False))

    def test_every_option(self) -> None:
        opts = cli.parse_args(["--timeout", "20", "--nodes=3", "--route", "vm", "--keep-going",
                               "-v", "--", "bash", "-c", "echo $RDMACXX_NODES"])
        self.assertEqual(opts, Options(command=["bash", "-c", "echo $RDMACXX_NODES"],
                                       timeout=20, nodes=3, route="vm", keep_going=True,
                                       verbose=True))

    def test_equals_forms_and_verbose(self) -> None:
        opts = cli.parse_args(["--timeout=5", "--route=module", "--verbose", "true"])
        self.assertEqual((opts.timeout, opts.route, opts.verbose, opts.command),
                         (5, "module", True, ["true"]))

    def test_command_without_double_dash(self) -> None:
        # Options end at the first word that is not one; the command keeps its own options.
        opts = cli.parse_args(["--nodes", "2", "ls", "--timeout", "-l"])
        self.assertEqual(opts.command, ["ls", "--timeout", "-l"])
        self.assertEqual(opts.timeout, 1800)

    def test_double_dash_then_dash_words(self) -> None:
        self.assertEqual(cli.parse_args(["--", "--weird", "x"]).command, ["--weird", "x"])

    def test_several_nodes_mean_route_vm(self) -> None:
        self.assertEqual(cli.parse_args(["--nodes", "2", "--", "true"]).route, "vm")
        self.assertEqual(cli.parse_args(["--nodes", "4", "--route", "vm", "true"]).nodes, 4)

    def test_rails(self) -> None:
        self.assertEqual(cli.parse_args(["true"]).rails, 1)
        opts = cli.parse_args(["--rails", "2", "--", "true"])
        self.assertEqual((opts.rails, opts.nodes, opts.route), (2, 1, "vm"))
        self.assertEqual(cli.parse_args(["--nodes=2", "--rails=2", "true"]).rails, 2)

    def test_help(self) -> None:
        self.assertIsNone(cli.parse_args(["--help", "--bogus"]))
        self.assertIsNone(cli.parse_args(["-h"]))

    def test_usage_errors(self) -> None:
        bad = {
            ("--bogus",): "unknown option --bogus",
            ("--timeout",): "--timeout needs a value",
            ("--nodes",): "--nodes needs a value",
            ("--route",): "--route needs a value",
            (): "no command given",
            ("--",): "no command given",
            ("--timeout", "0", "true"): "--timeout wants a positive number of seconds, not '0'",
            ("--timeout", "010", "true"): "not '010'",
            ("--timeout", "1.5", "true"): "not '1.5'",
            ("--timeout=", "true"): "not ''",
            ("--nodes", "0", "true"): "--nodes wants a positive number, not '0'",
            ("--nodes", "two", "true"): "not 'two'",
            ("--nodes", "5", "true"): "--nodes: at most 4 nodes, not 5",
            ("--route", "cloud", "true"): "--route must be auto, host, module or vm",
            ("--nodes", "2", "--route", "host", "true"): "--nodes 2 needs route vm",
            ("--nodes", "3", "--route=module", "true"): "--nodes 3 needs route vm",
            ("--rails", "0", "true"): "--rails wants a positive number, not '0'",
            ("--rails", "3", "true"): "--rails: at most 2 rails, not 3",
            ("--rails", "2", "--route", "module", "true"): "--rails 2 needs route vm",
        }
        for argv, message in bad.items():
            with self.subTest(argv=argv):
                with self.assertRaises(UsageError) as caught:
                    cli.parse_args(list(argv))
                self.assertEqual(caught.exception.status, 2)
                self.assertIn(message, caught.exception.message)
                self.assertIn("usage: tools/softroce", caught.exception.message)


class Main(unittest.TestCase):
    """main(): exit statuses and messages, without running any route."""

    def setUp(self) -> None:
        self.err = io.StringIO()
        patcher = mock.patch.object(sys, "stderr", self.err)
        patcher.start()
        self.addCleanup(patcher.stop)
        # main installs the handlers: put the test runner's back afterwards.
        saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        self.addCleanup(lambda: [signal.signal(s, h) for s, h in saved.items()])
        SIGNALS.reset()
        self.addCleanup(SIGNALS.reset)

    def run_main(self, argv: list[str], outcome) -> int:
        def fake_run(opts, deadline):
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome
        with mock.patch.object(routes, "run", fake_run):
            return cli.main(argv)

    def test_usage_error_exits_2(self) -> None:
        self.assertEqual(self.run_main(["--bogus"], 0), 2)
        self.assertEqual(self.err.getvalue().splitlines()[0], "softroce: unknown option --bogus")
        self.assertTrue(self.err.getvalue().splitlines()[1].startswith("softroce: usage: "))

    def test_help_exits_0(self) -> None:
        out = io.StringIO()
        with mock.patch.object(sys, "stdout", out):
            self.assertEqual(self.run_main(["--help"], 99), 0)
        self.assertIn("RDMACXX_SOFTROCE_CACHE", out.getvalue())
        self.assertIn("Exit status:", out.getvalue())

    def test_command_status_is_passed_on(self) -> None:
        self.assertEqual(self.run_main(["--", "false"], 1), 1)
        self.assertEqual(self.run_main(["--", "x"], 127), 127)

    def test_setup_failure_exits_125(self) -> None:
        self.assertEqual(self.run_main(["true"], SetupError("route host: no device")), 125)
        self.assertEqual(self.err.getvalue(), "softroce: route host: no device\n")

    def test_timeout_exits_124(self) -> None:
        self.assertEqual(self.run_main(["true"], TimedOut(20, "the VM")), 124)
        self.assertEqual(self.err.getvalue(),
                         "softroce: timed out after 20 s (--timeout); stopped the VM\n")

    def test_interrupt_exits_128_plus_signal(self) -> None:
        self.assertEqual(self.run_main(["true"], Interrupted(2)), 130)
        self.assertEqual(self.run_main(["true"], Interrupted(15)), 143)

    def test_bug_exits_125(self) -> None:
        self.assertEqual(self.run_main(["true"], RuntimeError("oops")), 125)
        self.assertIn("softroce: internal error:", self.err.getvalue())


class SignalHandling(unittest.TestCase):
    def setUp(self) -> None:
        saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        self.addCleanup(lambda: [signal.signal(s, h) for s, h in saved.items()])
        patcher = mock.patch.object(sys, "stderr", io.StringIO())
        patcher.start()
        self.addCleanup(patcher.stop)
        SIGNALS.reset()
        self.addCleanup(SIGNALS.reset)

    def test_sigint_ignored_on_entry_stays_ignored(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        SIGNALS.install()
        self.assertEqual(signal.getsignal(signal.SIGINT), signal.SIG_IGN)
        self.assertNotIn(signal.getsignal(signal.SIGTERM), (signal.SIG_IGN, signal.SIG_DFL))

    def test_deferred_then_raised_once(self) -> None:
        SIGNALS.install()
        steps = []
        with self.assertRaises(Interrupted) as caught:
            with SIGNALS.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                steps.append("cleanup went on")
                os.kill(os.getpid(), signal.SIGINT)  # a second signal is ignored
                steps.append("still")
        self.assertEqual((steps, caught.exception.status), (["cleanup went on", "still"], 143))
        self.assertEqual(sys.stderr.getvalue(), "softroce: interrupted (SIGTERM)\n")


if __name__ == "__main__":
    unittest.main()

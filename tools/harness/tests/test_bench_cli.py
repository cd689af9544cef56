"""tools/bench's flags: what parse() makes of good command lines, what it refuses, and main()'s exit status."""

import contextlib
import io
import os
import subprocess
import unittest

from harness.bench import cli

TOP = "/src/rdmacxx"


def parse(*argv):
    """parse() as tools/bench run from /home/me."""
    return cli.parse(list(argv), TOP, cwd="/home/me")


class Defaults(unittest.TestCase):
    def test_no_flags(self):
        o = parse()
        self.assertEqual(o.out, "/src/rdmacxx/bench-results")
        self.assertEqual(o.build, "/src/rdmacxx/build-perf")
        self.assertEqual((o.nodes, o.reps, o.h2h_reps, o.passes, o.min_time, o.sizes, o.reg_max),
                         (1, 3, 5, 2, "0.05", "reduced", 1073741824))
        self.assertTrue(o.perftest and o.suite)
        self.assertFalse(o.quick or o.inside or o.report_only)
        self.assertEqual(o.groups, ["reg", "lat", "bw", "rate", "cq", "asio"])
        self.assertEqual(o.runs, "/src/rdmacxx/bench-results/runs")

    def test_quick(self):
        o = parse("--quick")
        self.assertEqual((o.h2h_reps, o.reps, o.passes, o.min_time, o.reg_max), (2, 1, 1, "0.01", 16777216))

    def test_quick_keeps_what_is_given(self):
        o = parse("--quick", "--h2h-reps", "3", "--reps", "4", "--reg-max", "8192", "--passes", "5", "--min-time", "1")
        # --quick sets passes and min-time whatever was given, as it always did
        self.assertEqual((o.h2h_reps, o.reps, o.passes, o.min_time, o.reg_max), (3, 4, 1, "0.01", 8192))

    def test_nodes_2(self):
        o = parse("--nodes", "2")
        self.assertEqual(o.nodes, 2)
        self.assertEqual(o.out, "/src/rdmacxx/bench-results/nodes")
        self.assertEqual(o.build, "/src/rdmacxx/build-nodes")
        self.assertFalse(o.suite)

    def test_nodes_2_with_out_and_build(self):
        o = parse("--nodes", "2", "--out", "/tmp/r", "--build", "/b")
        self.assertEqual((o.out, o.build), ("/tmp/r", "/b"))

    def test_relative_paths(self):
        o = parse("--out", "res", "--build", "bp")
        self.assertEqual(o.out, "/home/me/res")  # from the caller's folder
        self.assertEqual(o.build, "/src/rdmacxx/bp")  # from the source tree

    def test_every_flag(self):
        o = parse("--out", "/o", "--h2h-reps", "7", "--reps", "2", "--passes", "3", "--min-time", "0.2", "--full",
                  "--reg-max", "4096", "--build", "/b", "--no-perftest", "--no-suite", "--groups", "lat asio",
                  "--report-only")
        self.assertEqual((o.out, o.h2h_reps, o.reps, o.passes, o.min_time, o.sizes, o.reg_max, o.build),
                         ("/o", 7, 2, 3, "0.2", "full", 4096, "/b"))
        self.assertFalse(o.perftest or o.suite)
        self.assertTrue(o.report_only)
        self.assertEqual(o.groups, ["lat", "asio"])
        self.assertTrue(o.has_group("asio") and not o.has_group("reg"))

    def test_empty_groups(self):
        self.assertEqual(parse("--groups", "").groups, [])

    def test_help(self):
        self.assertTrue(parse("-h").help)
        self.assertTrue(parse("--help").help)
        self.assertTrue(parse("--quick", "--help", "--no-such-flag").help)


class Refused(unittest.TestCase):
    def refused(self, message, *argv):
        with self.assertRaises(cli.UsageError) as e:
            parse(*argv)
        self.assertEqual(str(e.exception), message)

    def test_unknown(self):
        self.refused("unknown argument --fast (see --help)", "--fast")
        self.refused("unknown argument extra (see --help)", "--quick", "extra")

    def test_missing_values(self):
        self.refused("--out needs a folder", "--out")
        self.refused("--out needs a folder", "--out", "")
        self.refused("--reps needs a number", "--reps")
        self.refused("--h2h-reps needs a number", "--h2h-reps")
        self.refused("--min-time needs seconds", "--min-time")
        self.refused("--groups needs a list", "--groups")

    def test_nodes(self):
        self.refused("--nodes is 1 or 2", "--nodes", "3")
        self.refused("--nodes is 1 or 2", "--nodes", "two")

    def test_numbers(self):
        for flag in ("--reps", "--h2h-reps", "--passes", "--reg-max"):
            for bad in ("0", "-1", "1.5", "x", "07"):
                self.refused("--reps, --h2h-reps, --passes and --reg-max need positive numbers", flag, bad)

    def test_reg_max_floor(self):
        self.refused("--reg-max is at least 4096", "--reg-max", "4095")

    def test_groups(self):
        self.refused("unknown group lat2 (reg lat bw rate cq asio)", "--groups", "lat lat2")


class InsideArgs(unittest.TestCase):
    def test_round_trip(self):
        """The device run's arguments give the device run the same options."""
        for argv in ((), ("--quick",), ("--full", "--no-perftest", "--groups", "reg"), ("--nodes", "2", "--quick"),
                     ("--no-suite", "--reps", "9", "--out", "x")):
            o = parse(*argv)
            inner = cli.parse(cli.inside_args(o), TOP, cwd="/elsewhere")
            self.assertTrue(inner.inside)
            for field in ("out", "nodes", "rails", "reps", "h2h_reps", "passes", "min_time", "sizes", "reg_max", "build",
                          "perftest", "suite", "groups", "quick"):
                self.assertEqual(getattr(inner, field), getattr(o, field), (argv, field))

    def test_rails(self):
        o = parse("--nodes", "2", "--rails", "2")
        self.assertEqual((o.nodes, o.rails), (2, 2))
        for bad in (("--rails", "2"), ("--nodes", "2", "--rails", "3")):
            with self.assertRaises(cli.UsageError):
                parse(*bad)

    def test_words(self):
        o = parse("--quick")
        self.assertEqual(cli.inside_args(o), [
            "--inside", "--nodes", "1", "--rails", "1", "--out", "/src/rdmacxx/bench-results", "--reps", "1",
            "--h2h-reps", "2",
            "--passes", "1", "--min-time", "0.01", "--reg-max", "16777216", "--build", "/src/rdmacxx/build-perf",
            "--groups", "reg lat bw rate cq asio", "--quick"])


class Main(unittest.TestCase):
    def run_main(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli.main(list(argv), top=TOP)
        return status, out.getvalue(), err.getvalue()

    def test_usage_error_is_2(self):
        status, out, err = self.run_main("--nodes", "5")
        self.assertEqual((status, out, err), (2, "", "bench: --nodes is 1 or 2\n"))

    def test_help(self):
        status, out, _ = self.run_main("--help")
        self.assertEqual(status, 0)
        self.assertTrue(out.startswith("bench — rdmacxx head to head with perftest"))
        for flag in ("--quick", "--nodes 2", "--report-only", "--groups", "--no-perftest", "--no-suite", "--h2h-reps",
                     "--reg-max", "--min-time", "--full", "--passes", "--build", "--out"):
            self.assertIn(flag, out)
        self.assertIn("Exit status: 0 when the tables were printed", out)


class EntryPoint(unittest.TestCase):
    """tools/bench itself: Debian's python3, executable, and it finds its package from anywhere."""

    BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")

    def test_shebang(self):
        with open(self.BENCH) as f:
            self.assertEqual(f.readline(), "#!/usr/bin/python3\n")
        self.assertTrue(os.access(self.BENCH, os.X_OK))

    def test_runs(self):
        done = subprocess.run([self.BENCH, "--no-such-flag"], cwd="/", stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, check=False)
        self.assertEqual((done.returncode, done.stdout, done.stderr),
                         (2, "", "bench: unknown argument --no-such-flag (see --help)\n"))


if __name__ == "__main__":
    unittest.main()

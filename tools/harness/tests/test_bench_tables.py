"""The tables and JSON of saved runs (tests/fixtures/bench): the expected files are what the bash
version of tools/bench printed from the same raw outputs."""

import contextlib
import io
import json
import os
import shutil
import tempfile
import unittest
from unittest import mock

from harness.bench import cli, plots, suite, tables

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "bench")


def expected(run, name):
    with open(os.path.join(FIXTURES, "expected", run, name)) as f:
        return f.read()


class Folder:
    """A copy of fixture run RUN in a temporary folder (the report writes beside runs/)."""

    def __init__(self, run):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = os.path.join(self.tmp.name, run)
        shutil.copytree(os.path.join(FIXTURES, run), self.out)

    def read(self, name):
        with open(os.path.join(self.out, name)) as f:
            return f.read()

    def cleanup(self):
        self.tmp.cleanup()


class ReportOnly(unittest.TestCase):
    """tools/bench --report-only on fixture folders, through cli.main, gnuplot left out."""

    def report(self, run):
        folder = Folder(run)
        self.addCleanup(folder.cleanup)
        stdout = io.StringIO()
        with mock.patch("os.cpu_count", return_value=2), mock.patch.object(plots, "gnuplot") as gnuplot, \
                contextlib.redirect_stdout(stdout):
            status = cli.main(["--report-only", "--out", folder.out], top="/nonexistent")
        return folder, status, stdout.getvalue(), gnuplot

    def test_one_vm(self):
        folder, status, stdout, gnuplot = self.report("one")
        self.assertEqual(status, 0)
        for name in ("head-to-head.txt", "suite.txt", "latency-send.dat", "bandwidth-send.dat"):
            self.assertEqual(folder.read(name), expected("one", name), name)
        for name in ("head-to-head.json", "suite.json"):
            self.assertEqual(json.loads(folder.read(name)), json.loads(expected("one", name)), name)
        self.assertEqual(stdout, expected("one", "head-to-head.txt") + expected("one", "suite.txt")
                         + f"\nbench: wrote {folder.out}/suite.txt, suite.json, env.json, latency.svg/.png, "
                         "bandwidth.svg/.png\n")
        self.assertEqual(gnuplot.call_count, 2)  # latency and bandwidth

    def test_two_nodes(self):
        folder, status, stdout, gnuplot = self.report("nodes")
        self.assertEqual(status, 0)
        self.assertEqual(folder.read("head-to-head.txt"), expected("nodes", "head-to-head.txt"))
        self.assertEqual(json.loads(folder.read("head-to-head.json")),
                         json.loads(expected("nodes", "head-to-head.json")))
        self.assertIn("boot_s 48.3", stdout)
        self.assertIn("server on node 1, client on node 2 (198.18.0.1,198.18.0.2)", stdout)
        self.assertFalse(os.path.exists(os.path.join(folder.out, "suite.txt")))
        gnuplot.assert_not_called()

    def test_empty_folder(self):
        """Nothing to report: nothing printed, status 0, as ever."""
        with tempfile.TemporaryDirectory() as out:
            os.mkdir(os.path.join(out, "runs"))
            stdout = io.StringIO()
            with contextlib.redirect_stdout(stdout):
                self.assertEqual(tables.report(out), 0)
            self.assertEqual(stdout.getvalue(), "")

    def test_no_env_json(self):
        folder = Folder("nodes")
        self.addCleanup(folder.cleanup)
        os.remove(os.path.join(folder.out, "env.json"))
        with contextlib.redirect_stderr(io.StringIO()) as err:
            self.assertEqual(tables.report(folder.out), 1)
        self.assertIn("env.json is missing", err.getvalue())


class H2HTable(unittest.TestCase):
    ENV = {"device": "rxe0", "h2h_reps": 1, "nodes": "1", "address": "198.18.0.1"}

    def test_rows_ratios_and_verdicts(self):
        vals = {("same", "send_lat_8", "perftest"): {"lat": [10.0, 20.0, 30.0]},
                ("same", "send_lat_8", "rdmacxx"): {"lat": [15.0]},
                ("same", "write_bw_65536", "perftest"): {"bw": [40.0]},
                ("same", "write_bw_65536", "rdmacxx"): {"bw": [50.0]}}
        text, rows = tables.h2h_text(self.ENV, vals, {}, {})
        lines = text.splitlines()
        self.assertEqual(lines[0], "## identical flags: perftest and rdmacxx-perf given the same flags")
        # the columns: row 30, metric 17, perftest 9, spread 17, rdmacxx 9, spread 17, ratio 16, verdict
        self.assertEqual(lines[3], f"{'send_lat 8 B':<30} {'usec t_typical':<17} {'20':>9} {'10-30':>17} {'15':>9} "
                                   f"{'15-15':>17} {'0.750':>16}  ok")
        self.assertEqual(lines[4], f"{'write_bw 64 KiB':<30} {'MiB/s average':<17} {'40':>9} {'40-40':>17} {'50':>9} "
                                   f"{'50-50':>17} {'1.250':>16}  ok")
        self.assertEqual([(r["row"], r["ratio"], r["perftest_runs"]) for r in rows],
                         [("send_lat_8", 0.75, [10.0, 20.0, 30.0]), ("write_bw_65536", 1.25, [40.0])])
        self.assertIn("environment: device rxe0", text)

    def test_figures_format(self):
        self.assertEqual([tables.fmt4(v) for v in (None, 0.021434, 51.7, 999.94, 1990.4)],
                         ["-", "0.02143", "51.7", "999.9", "1990"])
        self.assertEqual(tables.spread([]), "-")


class SuiteRows(unittest.TestCase):
    def setUp(self):
        self.figures = suite.collect(os.path.join(FIXTURES, "one", "runs"))

    def test_aggregates_left_out(self):
        self.assertEqual(len(self.figures[("rdmacxx", "lat/send/busy/8")]["p50_us"]), 1)

    def test_keys(self):
        self.assertEqual(suite.key_of("lat/rdmacxx/send/busy/8/8/manual_time"), ("rdmacxx", "lat/send/busy/8"))
        self.assertEqual(suite.key_of("rate/raw/send/chain16/sig64/plain/64/0"),
                         ("raw", "rate/send/chain16/sig64/plain"))
        self.assertEqual(suite.key_of("cq/raw/drain/16/16/iterations:200/manual_time"), ("raw", "cq/drain/16"))
        self.assertEqual(suite.key_of("reg/rdmacxx/thp/4096/4096/1/manual_time"), ("rdmacxx", "reg/thp/4096"))

    def test_rows(self):
        rows = suite.rows(self.figures)
        self.assertEqual([r["section"] for r in rows][:1], ["latency"])
        send8 = next(r for r in rows if r["row"] == "send 8 B busy")
        self.assertEqual(send8["unit"], "us half RTT p50")
        self.assertAlmostEqual(send8["lib_raw"], send8["rdmacxx"] / send8["raw"])
        read8 = next(r for r in rows if r["row"] == "read 8 B busy")
        self.assertEqual(read8["unit"], "us read p50")
        regs = [r["row"] for r in rows if r["section"] == "registration"]
        self.assertEqual(regs, ["register_memory 4 KiB 4k", "register_memory 16 MiB 4k", "register_memory 4 KiB thp",
                                "register_memory 16 MiB thp", "register_memory 4 KiB hugetlb"])

    def test_checked_and_asio(self):
        self.assertEqual([k for k, *_ in suite.checked_rows(self.figures)],
                         ["rate/send/chain1/sig1/plain", "rate/send/chain16/sig64/plain",
                          "rate/write/chain16/sig64/plain"])
        asio = suite.asio_rows(self.figures)
        self.assertEqual([r["row"] for r in asio], ["send_rtt", "write_imm_rtt", "send_rate_q64"])
        self.assertIsNone(asio[2]["p99"])

    def test_failed_benchmarks(self):
        """A benchmark that failed is named in an error line, and makes no row."""
        figures = dict(self.figures)
        figures[("error", "reg/rdmacxx/hugetlb/16777216/16777216/2/manual_time")] = {"message": ["mmap: ENOMEM"]}
        figures[("error", "lat/raw/send/busy/8/8/manual_time")] = {"message": ["timeout"]}
        text, rows, _ = tables.suite_text({"reg_max": 16777216, "memory": "4 kB"}, figures)
        self.assertEqual(len(rows), len(suite.rows(self.figures)))
        self.assertIn("registration: went up to 16 MiB (--reg-max 16777216; VM memory 4 kB); failures: mmap: ENOMEM",
                      text)
        self.assertIn("error: lat/raw/send/busy/8/8/manual_time: timeout", text)

    def test_reg_caps(self):
        self.assertEqual(suite.reg_cap(4009152), 1 << 30)  # a 4G VM
        self.assertEqual(suite.reg_cap(2009152), 512 << 20)
        self.assertEqual(suite.reg_cap(1), 4096)
        self.assertEqual(suite.hugetlb_pool(16 << 20), 9)
        self.assertEqual(suite.hugetlb_pool((16 << 20) + 1), 10)
        self.assertEqual(suite.size_label(4096), "4 KiB")
        self.assertEqual(suite.size_label(1 << 30), "1 GiB")


class Plots(unittest.TestCase):
    def test_script(self):
        text = plots.script("/o/latency.svg", "T", "us", {"send": "/o/latency-send.dat"}, True)
        self.assertIn("set output '/o/latency.svg'", text)
        self.assertIn("set output '/o/latency.png'", text)
        self.assertIn("set logscale y", text)
        self.assertIn("plot '/o/latency-send.dat' using 1:2 with linespoints dt 1 title 'send rdmacxx', "
                      "'/o/latency-send.dat' using 1:3 with linespoints dt 2 title 'send raw verbs'", text)

    def test_dat(self):
        with tempfile.TemporaryDirectory() as out:
            path = plots.dat(os.path.join(out, "x.dat"), [(8, (1.5, None)), (4096, (12345678.0, 2.0))])
            with open(path) as f:
                self.assertEqual(f.read(), "8 1.5 NaN\n4096 1.23457e+07 2\n")

    def test_missing_gnuplot(self):
        with mock.patch("subprocess.run", side_effect=OSError("No such file")), \
                contextlib.redirect_stderr(io.StringIO()) as err:
            self.assertFalse(plots.gnuplot("plot x"))
        self.assertIn("install gnuplot-nox (tools/setup --bench)", err.getvalue())


if __name__ == "__main__":
    unittest.main()


class Syscalls(unittest.TestCase):
    """The Asio twins' system calls: strace -c's total line, runs/syscalls.json, and their table."""

    STRACE = ("% time     seconds  usecs/call     calls    errors syscall\n"
              "------ ----------- ----------- --------- --------- ----------------\n"
              " 61.00    0.000610           3       200           write\n"
              " 39.00    0.000390           2       150        12 epoll_wait\n"
              "------ ----------- ----------- --------- --------- ----------------\n"
              "100.00    0.001000           2       350        12 total\n")

    def test_total(self):
        self.assertEqual(suite.strace_total(self.STRACE), 350)
        self.assertIsNone(suite.strace_total("strace: exec: No such file or directory\n"))

    def test_command_fixes_the_iterations(self):
        argv, extra = suite.syscall_command("/b/bench-asio", "coawait", "send_rtt", 1100, "/r/out.txt")
        self.assertEqual(argv[:7], ["timeout", "600", "strace", "-f", "-c", "-o", "/r/out.txt"])
        self.assertIn("--benchmark_filter=^asio/coawait/send_rtt/", argv)
        self.assertEqual(extra, {"RDMACXX_BENCH_ITERATIONS": "1100"})

    def test_rows_and_table(self):
        with tempfile.TemporaryDirectory() as runs:
            self.assertEqual(suite.syscall_rows(runs), [])
            with open(os.path.join(runs, "syscalls.json"), "w") as f:
                json.dump({"send_rtt": {"coawait": 2.5, "plain": 2.0, "raw": 2.0}}, f)
            rows = suite.syscall_rows(runs)
        self.assertEqual(rows, [("SEND round trip 8 B", "per round trip", {"coawait": 2.5, "plain": 2.0, "raw": 2.0})])
        text = "\n".join(tables.suite_syscalls(rows))
        self.assertIn("system calls per operation", text)
        self.assertRegex(text, r"SEND round trip 8 B\s+per round trip\s+2.5\s+2\s+2\s+1.250")


class MultirailRows(unittest.TestCase):
    """One rail against two: multirail_copy's figures parsed, the table and its ratio."""

    def test_throughput_and_report(self):
        from harness.bench import multirail
        out = "copied: 3 rounds of 64 MiB in 20.00 s, 10.1 MB/s\nverified: 3 of 3 rounds arrived byte for byte\n"
        self.assertEqual(multirail.throughput(out), 10.1)
        self.assertIsNone(multirail.throughput(out.replace("3 of 3", "2 of 3")))
        self.assertIsNone(multirail.throughput("nothing"))
        with tempfile.TemporaryDirectory() as runs:
            with open(os.path.join(runs, "multirail.json"), "w") as f:
                json.dump({"mib": 64, "rounds": 3, "rows": {"one rail (rxe0)": [10.0, 12.0, None],
                                                            "two rails (rxe0,rxe1), striped": [11.0, 13.0, 12.0]}}, f)
            table = multirail.report(runs)
        self.assertIn("two rails / one rail: 1.091", table)
        self.assertIn("2/3", table)

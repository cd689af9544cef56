"""The head to head: rows, the perftest and rdmacxx-perf command lines of each, the figures of saved outputs."""

import os
import shutil
import tempfile
import unittest

from harness.bench import cli, h2h

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "bench")
RUNS = os.path.join(FIXTURES, "one", "runs")


def options(*argv):
    return cli.parse(list(argv), "/src", cwd="/src")


class Rows(unittest.TestCase):
    def test_full_rows(self):
        names = [name for name, _, _ in h2h.rows(quick=False)]
        self.assertEqual(names, ["send_lat_8", "write_lat_8", "read_lat_8", "atomic_lat_8", "send_lat_8_events",
                                 "send_bw_65536", "write_bw_65536", "read_bw_65536", "write_bw_65536_bidir",
                                 "send_rate_8", "write_rate_8", "read_rate_8", "atomic_rate_8"])

    def test_quick_rows(self):
        self.assertEqual(h2h.rows(quick=True), [
            ("send_lat_8", "send_lat", ["-s", "8", "-n", "500", "-I", "0"]),
            ("write_lat_8", "write_lat", ["-s", "8", "-n", "500", "-I", "0"]),
            ("write_bw_65536", "write_bw", ["-s", "65536", "-n", "200", "-t", "128", "-Q", "16", "-l", "1", "-I", "0"]),
            ("send_rate_8", "send_bw", ["-s", "8", "-n", "4096", "-t", "128", "-l", "16", "-Q", "16", "-I", "0"])])

    def test_no_inline_flag_on_read_and_atomics(self):
        """perftest refuses -I on READ and atomics."""
        for name, test, flags in h2h.rows(quick=False):
            self.assertEqual("-I" in flags, not test.startswith(("read", "atomic")), name)

    def test_default_rows(self):
        self.assertEqual(h2h.default_rows(quick=True), [("send_default_8", "send_bw", ["-s", "8"]),
                                                        ("write_default_8", "write_bw", ["-s", "8"])])
        self.assertEqual([n for n, _, _ in h2h.default_rows(quick=False)],
                         ["send_default_2", "send_default_8", "send_default_64",
                          "write_default_2", "write_default_8", "write_default_64"])


class Commands(unittest.TestCase):
    def test_perftest(self):
        server, client = h2h.commands("perftest", "write_bw", ["-s", "65536", "-b"], "rxe0", 1, 18601,
                                      "198.18.0.1", "/b")
        self.assertEqual(server, ["ib_write_bw", "-d", "rxe0", "-x", "1", "-p", "18601", "-F", "-s", "65536", "-b"])
        self.assertEqual(client, server + ["198.18.0.1"])

    def test_rdmacxx_perf(self):
        server, client = h2h.commands("rdmacxx", "send_lat", ["-s", "8", "-e"], "rxe0", 3, 18602, "127.0.0.1", "/b")
        self.assertEqual(server, ["/b/benchmarks/perf/rdmacxx-perf", "send_lat", "-d", "rxe0", "-x", "3", "-p",
                                  "18602", "-s", "8", "-e"])
        self.assertEqual(client, server + ["127.0.0.1"])

    def test_same_flags_for_both_tools(self):
        for _, test, flags in h2h.rows(quick=False):
            pt, _ = h2h.commands("perftest", test, flags, "rxe0", 1, 1, "a", "/b")
            rx, _ = h2h.commands("rdmacxx", test, flags, "rxe0", 1, 1, "a", "/b")
            self.assertEqual(pt[-len(flags):], flags)
            self.assertEqual(rx[-len(flags):], flags)
            self.assertEqual(pt[0], f"ib_{test}")
            self.assertEqual(rx[1], test)

    def test_schedule(self):
        """Per repetition the rows then the defaults; the tools alternate, the order flips every repetition."""
        runs = h2h.schedule(options("--quick"))
        self.assertEqual(len(runs), 2 * (4 + 2) * 2)
        self.assertEqual([(b, n, t, r) for b, n, t, r, _, _ in runs[:3]],
                         [("same", "send_lat_8", "perftest", 1), ("same", "send_lat_8", "rdmacxx", 1),
                          ("same", "write_lat_8", "perftest", 1)])
        self.assertEqual([(b, n, t, r) for b, n, t, r, _, _ in runs[10:14]],
                         [("defaults", "write_default_8", "perftest", 1), ("defaults", "write_default_8", "rdmacxx", 1),
                          ("same", "send_lat_8", "rdmacxx", 2), ("same", "send_lat_8", "perftest", 2)])
        self.assertEqual(len(h2h.schedule(options())), 5 * (13 + 6) * 2)


class Figures(unittest.TestCase):
    def test_perftest_latency(self):
        rec = h2h.figures(os.path.join(RUNS, "h2h.same.send_lat_8.perftest.1.client.txt"))
        self.assertEqual(rec, {"inline": 0, "lat": 11.65, "p99": 260.22, "p999": 8113.22})

    def test_rdmacxx_perf_latency(self):
        rec = h2h.figures(os.path.join(RUNS, "h2h.same.send_lat_8.rdmacxx.1.client.txt"))
        self.assertEqual(sorted(rec), ["inline", "lat", "p99", "p999"])
        self.assertEqual(rec["inline"], 0)

    def test_bandwidth(self):
        rec = h2h.figures(os.path.join(RUNS, "h2h.same.write_bw_65536.perftest.1.client.txt"))
        self.assertEqual(rec["bw"], 41.28)
        self.assertGreater(rec["mpps"], 0)

    def test_server_figures_when_the_client_has_none(self):
        """perftest's ib_send_bw may print its figures on the server only: the table takes those."""
        with tempfile.TemporaryDirectory() as runs:
            shutil.copy(os.path.join(RUNS, "h2h.same.send_rate_8.perftest.1.server.txt"), runs)
            with open(os.path.join(runs, "h2h.same.send_rate_8.perftest.1.client.txt"), "w") as f:
                f.write(" Max inline data : 0[B]\n")
            vals, inline, failed = h2h.collect(runs)
        self.assertEqual(vals, {("same", "send_rate_8", "perftest"): {"bw": [0.15], "mpps": [0.019142]}})
        self.assertEqual(failed, {})

    def test_no_file_no_figures(self):
        self.assertEqual(h2h.figures(os.path.join(RUNS, "nothing.txt")), {})

    def test_failed_run(self):
        self.assertEqual(h2h.figures(os.path.join(RUNS, "h2h.same.write_lat_8.rdmacxx.1.client.txt")), {})

    def test_collect(self):
        vals, inline, failed = h2h.collect(RUNS)
        self.assertEqual(vals[("same", "send_lat_8", "perftest")]["lat"], [11.65, 3968.25])
        self.assertEqual(len(vals[("same", "send_rate_8", "perftest")]["mpps"]), 2)  # from the servers
        self.assertEqual(failed, {("same", "write_lat_8", "rdmacxx"): ["1"]})
        self.assertEqual(inline[("defaults", "send_default_8", "rdmacxx")], 512)
        self.assertEqual(inline[("defaults", "send_default_8", "perftest")], 0)


class Names(unittest.TestCase):
    def test_describe(self):
        self.assertEqual(h2h.describe("send_lat_8"), "send_lat 8 B")
        self.assertEqual(h2h.describe("send_lat_8_events"), "send_lat 8 B events")
        self.assertEqual(h2h.describe("write_bw_65536_bidir"), "write_bw 64 KiB bidir")
        self.assertEqual(h2h.describe("atomic_rate_8"), "atomic_bw rate 8 B")
        self.assertEqual(h2h.describe("write_default_64"), "write_bw defaults 64 B")
        self.assertEqual(h2h.describe("odd"), "odd")

    def test_kind_and_metric(self):
        self.assertEqual([h2h.kind(r) for r in ("read_lat_8", "send_bw_65536", "send_rate_8", "send_default_2", "x")],
                         ["lat", "bw", "rate", "default", "?"])
        self.assertEqual(h2h.metric("read_lat_8"), ("lat", "usec t_typical", "lower"))
        self.assertEqual(h2h.metric("send_bw_65536"), ("bw", "MiB/s average", "higher"))
        self.assertEqual(h2h.metric("send_default_2"), ("mpps", "Mpps", "higher"))

    def test_order(self):
        rows = ["write_rate_8", "send_default_2", "send_lat_8_events", "atomic_lat_8", "read_bw_65536", "send_lat_8"]
        self.assertEqual(sorted(rows, key=h2h.sort_key), ["atomic_lat_8", "send_lat_8", "send_lat_8_events",
                                                          "read_bw_65536", "write_rate_8", "send_default_2"])


class Verdicts(unittest.TestCase):
    def test_latency(self):
        self.assertEqual(h2h.ratio_verdict(10.0, 9.0, "lower"), (0.9, "ok"))
        self.assertEqual(h2h.ratio_verdict(10.0, 10.0, "lower"), (1.0, "ok"))
        self.assertEqual(h2h.ratio_verdict(10.0, 12.5, "lower"), (1.25, "BEHIND"))

    def test_rate(self):
        self.assertEqual(h2h.ratio_verdict(2.0, 3.0, "higher"), (1.5, "ok"))
        self.assertEqual(h2h.ratio_verdict(2.0, 1.0, "higher"), (0.5, "BEHIND"))

    def test_missing(self):
        self.assertEqual(h2h.ratio_verdict(None, 3.0, "higher"), (None, "-"))
        self.assertEqual(h2h.ratio_verdict(2.0, None, "lower"), (None, "-"))


if __name__ == "__main__":
    unittest.main()

"""What tools/bench runs, without a device: the build, the softroce and suite command lines, the
environment record's helpers, node 2, and the server/client pair with stand-in programs."""

import contextlib
import io
import json
import os
import tempfile
import unittest
from unittest import mock

from harness.bench import cli, env, h2h, host, inside, nodes, suite


def options(*argv):
    return cli.parse(list(argv), "/src", cwd="/src")


class Build(unittest.TestCase):
    NINJA = ("benchmarks/bench: cpp_LINKER\nbenchmarks/bench-asio: cpp_LINKER\n"
             "benchmarks/perf/rdmacxx-perf: cpp_LINKER\n")

    def test_meson_setup(self):
        self.assertEqual(host.meson_setup(options()), [
            "meson", "setup", "/src/build-perf", "/src", "-Dbenchmarks=enabled", "-Dbuildtype=release",
            "-Dtests=disabled", "-Dexamples=disabled"])
        self.assertEqual(host.meson_setup(options("--nodes", "2")), [
            "meson", "setup", "/src/build-nodes", "/src", "-Dbuildtype=release", "-Dtests=disabled",
            "-Dexamples=enabled", "-Dbenchmarks=disabled"])

    def test_targets(self):
        self.assertEqual(host.targets(options(), self.NINJA),
                         ["benchmarks/perf/rdmacxx-perf", "benchmarks/bench", "benchmarks/bench-asio"])
        self.assertEqual(host.targets(options(), "benchmarks/bench: cpp_LINKER\n"),  # no Asio found
                         ["benchmarks/perf/rdmacxx-perf", "benchmarks/bench"])
        self.assertEqual(host.targets(options("--groups", "asio"), self.NINJA),
                         ["benchmarks/perf/rdmacxx-perf", "benchmarks/bench-asio"])
        self.assertEqual(host.targets(options("--no-suite"), self.NINJA), ["benchmarks/perf/rdmacxx-perf"])
        self.assertEqual(host.targets(options("--nodes", "2"), self.NINJA), ["benchmarks/perf/rdmacxx-perf"])

    def test_tee(self):
        """softroce's output goes both to ours and into runs/softroce.txt; its status comes back."""
        with tempfile.TemporaryDirectory() as out:
            path = os.path.join(out, "softroce.txt")
            ours = io.TextIOWrapper(io.BytesIO())
            with mock.patch("sys.stdout", ours):
                status = host.tee(["sh", "-c", "echo up; echo oops >&2; exit 3"], path, dict(os.environ))
            self.assertEqual(status, 3)
            with open(path) as f:
                self.assertEqual(f.read(), "up\noops\n")
            self.assertEqual(ours.buffer.getvalue(), b"up\noops\n")

    def test_softroce(self):
        cmd = host.softroce_command(options("--nodes", "2", "--quick"))
        self.assertEqual(cmd[:6], ["/src/tools/softroce", "--timeout", "7200", "--nodes", "2", "--"])
        self.assertEqual(cmd[6:9], ["/src/tools/bench", "--inside", "--nodes"])
        self.assertEqual(host.softroce_command(options())[:4], ["/src/tools/softroce", "--timeout", "7200", "--"])


class SuiteCommands(unittest.TestCase):
    def test_group(self):
        o = options("--quick", "--out", "/o")
        self.assertEqual(suite.group_command(o, "lat", 1), [
            "/src/build-perf/benchmarks/bench", "--sizes=reduced", "--reg_max=16777216", "--benchmark_filter=^lat/",
            "--benchmark_min_time=0.01", "--benchmark_repetitions=1", "--benchmark_enable_random_interleaving=true",
            "--benchmark_out=/o/runs/suite-lat-1.json", "--benchmark_out_format=json"])

    def test_asio(self):
        o = options("--out", "/o", "--full")
        self.assertEqual(suite.group_command(o, "asio", 2), [
            "/src/build-perf/benchmarks/bench-asio", "--benchmark_min_time=0.05", "--benchmark_repetitions=3",
            "--benchmark_enable_random_interleaving=true", "--benchmark_out=/o/runs/suite-asio-2.json",
            "--benchmark_out_format=json"])

    def test_registration(self):
        cmd = suite.registration_command(options("--out", "/o", "--full"), "thp")
        self.assertEqual(cmd[1:4], ["--sizes=full", "--reg_max=1073741824", "--benchmark_filter=^reg/[^/]+/thp/"])
        self.assertEqual(cmd[-2], "--benchmark_out=/o/runs/suite-reg-thp.json")

    def test_missing_program(self):
        said = []
        with tempfile.TemporaryDirectory() as out:
            suite._run(["/nonexistent/bench"], os.path.join(out, "x.txt"), "lat pass 1", said.append)
            with open(os.path.join(out, "x.txt")) as f:
                self.assertIn("/nonexistent/bench", f.read())
        self.assertEqual(said, ["bench: lat pass 1 failed (see runs/)"])

    def test_passes(self):
        """Per pass each group then asio (when built), the groups --groups names only."""
        with tempfile.TemporaryDirectory() as build:
            os.makedirs(os.path.join(build, "benchmarks"))
            asio = os.path.join(build, "benchmarks", "bench-asio")
            with open(asio, "w"):
                pass
            os.chmod(asio, 0o755)
            o = options("--build", build, "--out", build, "--passes", "2", "--groups", "cq lat asio")
            ran = []
            with mock.patch.object(suite, "_run", lambda argv, out, what, log, env=None: ran.append(os.path.basename(out))), \
                    mock.patch.object(suite.shutil, "which", lambda _: None):
                suite.run_suite(o, log=lambda *_: None)
        self.assertEqual(ran, ["suite-lat-1.txt", "suite-cq-1.txt", "suite-asio-1.txt",
                               "suite-lat-2.txt", "suite-cq-2.txt", "suite-asio-2.txt"])

    def test_syscalls(self):
        """With strace: each counted Asio row of each twin twice, with the two fixed iteration
        counts in the environment; runs/syscalls.json from the totals (None where none)."""
        with tempfile.TemporaryDirectory() as out:
            o = options("--build", out, "--out", out, "--groups", "asio")
            os.makedirs(o.runs, exist_ok=True)
            ran = []

            def fake_run(argv, out_txt, what, log, env=None):
                ran.append((os.path.basename(out_txt), env["RDMACXX_BENCH_ITERATIONS"]))
                calls = int(env["RDMACXX_BENCH_ITERATIONS"]) * (3 if "coawait" in out_txt else 2) + 50
                if "raw-send_rate" not in out_txt:
                    with open(argv[argv.index("-o") + 1], "w") as f:
                        f.write(f"100.00    0.001000           2       {calls}        12 total\n")

            with mock.patch.object(suite, "_run", fake_run), mock.patch.object(suite.shutil, "which", lambda _: "/s"):
                suite.run_counts(o, "/b/bench-asio", "syscalls", log=lambda *_: None)
            with open(os.path.join(o.runs, "syscalls.json")) as f:
                counted = json.load(f)
        self.assertEqual(len(ran), 12)
        self.assertEqual(ran[0], ("strace-coawait-send_rtt-100.log", "100"))
        self.assertEqual(ran[1], ("strace-coawait-send_rtt-1100.log", "1100"))
        self.assertEqual(counted["send_rtt"], {"coawait": 3.0, "plain": 2.0, "raw": 2.0})
        self.assertEqual(ran[6], ("strace-coawait-send_rate_q64-10.log", "10"))
        self.assertAlmostEqual(counted["send_rate_q64"]["coawait"], 3.0 / 1024)
        self.assertIsNone(counted["send_rate_q64"]["raw"])

    def test_instructions(self):
        """With valgrind: the same runs under callgrind; runs/instructions.json from the
        `summary:` lines of its output files."""
        with tempfile.TemporaryDirectory() as out:
            o = options("--build", out, "--out", out, "--groups", "asio")
            os.makedirs(o.runs, exist_ok=True)
            ran = []

            def fake_run(argv, out_txt, what, log, env=None):
                ran.append((os.path.basename(out_txt), argv[:3]))
                n = int(env["RDMACXX_BENCH_ITERATIONS"])
                target = next(a.split("=", 1)[1] for a in argv if a.startswith("--callgrind-out-file="))
                with open(target, "w") as f:
                    f.write(f"events: Ir\nsummary: {n * (5000 if 'coawait' in out_txt else 4000) + 123456}\n")

            with mock.patch.object(suite, "_run", fake_run), mock.patch.object(suite.shutil, "which", lambda _: "/s"):
                suite.run_counts(o, "/b/bench-asio", "instructions", log=lambda *_: None)
            with open(os.path.join(o.runs, "instructions.json")) as f:
                counted = json.load(f)
        self.assertEqual(len(ran), 12)
        self.assertEqual(ran[0], ("valgrind-coawait-send_rtt-100.log", ["timeout", "1200", "valgrind"]))
        self.assertEqual(counted["send_rtt"], {"coawait": 5000.0, "plain": 4000.0, "raw": 4000.0})
        self.assertAlmostEqual(counted["send_rate_q64"]["plain"], 4000.0 / 1024)


class Environment(unittest.TestCase):
    def test_roce_v2_gid(self):
        with tempfile.TemporaryDirectory() as sysfs:
            port = os.path.join(sysfs, "rxe0", "ports", "1")
            os.makedirs(os.path.join(port, "gid_attrs", "types"))
            os.makedirs(os.path.join(port, "gids"))
            for i, kind, gid in ((0, "IB/RoCE v1", "fe80:0000:0000:0000:0000:0000:0000:0001"),
                                 (1, "RoCE v2", "fe80:0000:0000:0000:0000:0000:0000:0001"),
                                 (2, "IB/RoCE v1", "0000:0000:0000:0000:0000:ffff:c612:0001"),
                                 (3, "RoCE v2", "0000:0000:0000:0000:0000:ffff:c612:0001")):
                with open(os.path.join(port, "gid_attrs", "types", str(i)), "w") as f:
                    f.write(kind + "\n")
                with open(os.path.join(port, "gids", str(i)), "w") as f:
                    f.write(gid + "\n")
            self.assertEqual(env.roce_v2_gid("rxe0", sysfs), 3)
            self.assertEqual(env.roce_v2_gid("nothing", sysfs), 1)

    def test_proc_files(self):
        self.assertEqual(env.cpu_model("processor\t: 0\nmodel name\t: QEMU TCG CPU version 2.5+\n"),
                         "QEMU TCG CPU version 2.5+")
        self.assertEqual(env.mem_total("MemTotal:        4009152 kB\nMemFree: 1 kB\n"), "4009152 kB")
        self.assertEqual(env.first_field(" state: PORT_ACTIVE (4)\n active_mtu: 1024 (3)\n", "active_mtu", 1), "1024")

    def test_for_tables(self):
        with tempfile.TemporaryDirectory() as out:
            os.mkdir(os.path.join(out, "runs"))
            with open(os.path.join(out, "env.json"), "w") as f:
                json.dump({"device": "rxe0"}, f)
            with open(os.path.join(out, "runs", "host-load-after.txt"), "w") as f:
                f.write("1.00 2.00 3.00\n")
            with open(os.path.join(out, "runs", "softroce.txt"), "w") as f:
                f.write("softroce: 2 nodes up in 51.5 s (booted in parallel; 1 CPU each)\n")
            self.assertEqual(env.for_tables(out, host_cpus=4),
                             {"device": "rxe0", "host_load_after": "1.00 2.00 3.00", "host_cpus": 4})
            self.assertEqual(env.for_tables(out, boot=True, host_cpus=4)["boot_s"], 51.5)
            env.set_reg_max(os.path.join(out, "env.json"), 4096)
            with open(os.path.join(out, "env.json")) as f:
                self.assertEqual(json.load(f), {"device": "rxe0", "reg_max": 4096})


class Nodes(unittest.TestCase):
    def test_addresses(self):
        self.assertEqual(nodes.addresses("198.18.0.1,198.18.0.2"), ("198.18.0.1", "198.18.0.2"))
        self.assertEqual(nodes.addresses("198.18.0.1,198.18.0.2,198.18.0.3"), ("198.18.0.1", "198.18.0.2"))
        self.assertEqual(nodes.client_prefix("198.18.0.2"), ["timeout", "200", "ssh", "198.18.0.2"])


class Pair(unittest.TestCase):
    """h2h.pair with stand-ins for the tools (sh)."""

    def test_server_and_client(self):
        with tempfile.TemporaryDirectory() as runs:
            prefix = os.path.join(runs, "h2h.same.x.perftest.1")
            said = []
            h2h.pair(prefix, ["sh", "-c", "echo server"], ["sh", "-c", "echo client"], log=said.append)
            with open(prefix + ".server.txt") as f:
                self.assertEqual(f.read(), "server\n")
            with open(prefix + ".client.txt") as f:
                self.assertEqual(f.read(), "client\n")
            self.assertEqual(said, [])

    def test_failed_server(self):
        with tempfile.TemporaryDirectory() as runs:
            prefix = os.path.join(runs, "h2h.same.x.rdmacxx.2")
            said = []
            h2h.pair(prefix, ["sh", "-c", "exit 3"], ["sh", "-c", "echo no; exit 1"], log=said.append)
            self.assertEqual(said, ["bench: h2h.same.x.rdmacxx.2 failed (see runs/)"])

    def test_client_prefix(self):
        with tempfile.TemporaryDirectory() as runs:
            prefix = os.path.join(runs, "p")
            h2h.pair(prefix, ["true"], ["x"], client_prefix=["echo", "via"], log=None)
            with open(prefix + ".client.txt") as f:
                self.assertEqual(f.read(), "via timeout 180 x\n")

    def test_run_ports_and_names(self):
        calls = []
        with mock.patch.object(h2h, "pair", lambda prefix, server, client, *_: calls.append((prefix, server, client))):
            h2h.run(options("--quick", "--out", "/o", "--h2h-reps", "1"), "rxe0", 1, "198.18.0.1", log=lambda *_: None)
        self.assertEqual(len(calls), 12)
        self.assertEqual(calls[0][0], "/o/runs/h2h.same.send_lat_8.perftest.1")
        self.assertEqual(calls[0][1][calls[0][1].index("-p") + 1], "18601")
        self.assertEqual(calls[-1][0], "/o/runs/h2h.defaults.write_default_8.rdmacxx.1")
        self.assertEqual(calls[-1][2][-4:], ["18612", "-s", "8", "198.18.0.1"])


class Inside(unittest.TestCase):
    def test_needs_softroce(self):
        with mock.patch.dict(os.environ, {"RDMACXX_DEVICE": ""}), contextlib.redirect_stderr(io.StringIO()) as err:
            self.assertEqual(inside.run(options("--inside")), 1)
        self.assertIn("runs under tools/softroce", err.getvalue())

    def test_order(self):
        """Environment, head to head, registration, suite; --no-perftest and --groups leave parts out."""
        done = []
        with tempfile.TemporaryDirectory() as out, \
                mock.patch.dict(os.environ, {"RDMACXX_DEVICE": "rxe0", "RDMACXX_ADDR": "198.18.0.1"}), \
                mock.patch.object(env, "roce_v2_gid", return_value=1), \
                mock.patch.object(env, "record", lambda *a: done.append("env")), \
                mock.patch.object(h2h, "run", lambda *a: done.append("h2h")), \
                mock.patch.object(suite, "run_registration", lambda *a: done.append("reg")), \
                mock.patch.object(suite, "run_suite", lambda *a: done.append("suite")), \
                contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(inside.run(options("--inside", "--out", out)), 0)
            self.assertEqual(done, ["env", "h2h", "reg", "suite"])
            done.clear()
            self.assertEqual(inside.run(options("--inside", "--out", out, "--no-perftest", "--groups", "lat")), 0)
            self.assertEqual(done, ["env", "suite"])


if __name__ == "__main__":
    unittest.main()

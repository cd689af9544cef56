"""Unit tests of tools/check's driver (tools/harness/check): counting, suites, command line."""

import json
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from harness.check import cli, suites
from harness.check.tally import Tally, doctest_counts, failed_cases, read_testlog

SUMMARY = ("[doctest] doctest version is \"2.4.9\"\n"
           "[doctest] test cases: 80 | 78 passed | 2 failed | 0 skipped\n"
           "[doctest] assertions: 900 | 898 passed | 2 failed |\n")


class DoctestCounts(unittest.TestCase):
    def test_summary_is_read(self):
        self.assertEqual(doctest_counts(SUMMARY), (78, 2))

    def test_last_summary_wins(self):
        text = SUMMARY + "[doctest] test cases: 5 | 5 passed | 0 failed | 0 skipped\n"
        self.assertEqual(doctest_counts(text), (5, 0))

    def test_no_summary_is_none(self):
        self.assertIsNone(doctest_counts("Segmentation fault\n"))


class FailedCases(unittest.TestCase):
    def test_only_the_failing_blocks_and_the_tail(self):
        out = ("=" * 79 + "\nTEST CASE:  fine\nMESSAGE: all good\n" + "=" * 79 +
               "\nTEST CASE:  broken\nx.cpp:41: ERROR: test case THREW exception: RNR\n" +
               "=" * 79 + "\n" + SUMMARY)
        text = failed_cases(out)
        self.assertIn("TEST CASE:  broken", text)
        self.assertNotIn("all good", text)
        self.assertIn("[doctest] test cases: 80", text)

    def test_the_summary_names_each_failed_case_and_its_first_error(self):
        out = ("=" * 79 + "\nx.cpp:40:\nTEST CASE:  broken\n\n"
               "x.cpp:41: ERROR: CHECK( a == b ) is NOT correct!\n" + "=" * 79 + "\n" + SUMMARY)
        t = Tally()
        t.doctest("device", out, 1)
        self.assertEqual(t.failed, 2)
        self.assertIn("device (2 test cases)\n  broken: x.cpp:41: ERROR: CHECK( a == b ) is NOT correct!",
                      t.failures)


class TallyCounts(unittest.TestCase):
    def test_doctest_failures_and_crashes(self):
        t = Tally()
        t.doctest("device", SUMMARY, 1)
        self.assertEqual((t.passed, t.failed), (78, 2))
        t.doctest("crash", "AddressSanitizer: heap-use-after-free\n", 134)
        self.assertEqual(t.failed, 3)
        self.assertIn("crash (no doctest summary, exit 134)", t.failures)

    def test_clean_summary_but_bad_exit_fails(self):
        t = Tally()
        t.doctest("leaks", "[doctest] test cases: 3 | 3 passed | 0 failed | 0 skipped\n", 23)
        self.assertEqual((t.passed, t.failed), (3, 1))

    def test_summary_ends_with_the_count_line(self):
        t = Tally()
        t.ok("a", 3)
        t.bad("b")
        with t.stage("build: gcc"):
            pass
        lines = t.summary().splitlines()
        self.assertEqual(lines[-1], "3 passed, 1 failed")
        self.assertTrue(any(line.startswith("build: gcc") for line in lines))
        self.assertIn("failed: b", lines)

    def test_meson_run_with_no_test_fails(self):
        t = Tally()
        t.meson_tests("headers (gcc)", [])
        self.assertEqual(t.failed, 1)


class TestLog(unittest.TestCase):
    def test_reads_meson_testlog(self):
        rows = [{"name": "header rdmacxx/gid.hpp", "result": "OK", "duration": 0.5, "stdout": ""},
                {"name": "unit", "result": "FAIL", "duration": 2.0, "stdout": SUMMARY}]
        with tempfile.TemporaryDirectory() as d:
            log = Path(d) / "testlog.json"
            log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
            tests = read_testlog(log)
        self.assertEqual([t.name for t in tests], ["header rdmacxx/gid.hpp", "unit"])
        self.assertTrue(tests[0].ok)
        self.assertFalse(tests[1].ok)
        t = Tally()
        t.meson_tests("unit (gcc)", tests[1:], doctest=True)
        self.assertEqual((t.passed, t.failed), (78, 2))


class CommandLine(unittest.TestCase):
    def test_unknown_suite_is_a_usage_error(self):
        with mock.patch("sys.stderr"), self.assertRaises(SystemExit) as e:
            cli.parse_args(["--suite", "nope"])
        self.assertEqual(e.exception.code, 2)

    def test_suites_repeat(self):
        self.assertEqual(cli.parse_args(["--suite", "lint", "--suite", "unit"]).suite,
                         ["lint", "unit"])

    def test_builds_for_a_suite(self):
        self.assertEqual(cli.builds_for(["lint"], False), [("clang", False)])
        self.assertEqual(cli.builds_for(["tools", "fuzz"], False), [])
        made = dict(cli.builds_for(list(suites.SUITES), False))
        self.assertTrue(all(made.values()), made)
        self.assertEqual(cli.builds_for(list(suites.SUITES), True), [("gcc", True)])

    def test_every_suite_has_a_title(self):
        for s in suites.SUITES.values():
            self.assertTrue(s.title, s.name)


class ShellFiles(unittest.TestCase):
    def test_the_shell_scripts_are_found(self):
        top = Path(__file__).resolve().parents[3]
        found = suites.shell_files(top)
        self.assertIn("tools/harness/check/on_device.sh", found)
        self.assertIn("tools/consumers", found)
        self.assertIn("tools/check", found)  # its line of shell that makes sure of python3
        self.assertNotIn("tools/harness/check/cli.py", found)


if __name__ == "__main__":
    unittest.main()

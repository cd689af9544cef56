"""Checks rdmacxx-perf's --json output: the tool, the test, the role, the configuration keys,
and figures above 0 (tools/check's smoke run; no figure is asserted beyond that).

Usage: python3 perf_json.py FILE TEST
"""

import json
import sys


def check(path: str, test: str) -> None:
    """Raises AssertionError when FILE is not a client's --json output of TEST with figures."""
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    want = (["t_min", "t_max", "t_typical", "t_avg", "t_stdev", "p99", "p99_9"]
            if test.endswith("_lat") else ["bw_peak", "bw_average", "msg_rate"])
    assert d["tool"] == "rdmacxx-perf" and d["test"] == test and d["role"] == "client", d
    config = {"tx_depth", "post_list", "cq_mod", "inline_size", "mtu", "events", "bidirectional",
              "iterations"}
    assert config <= d["config"].keys(), d["config"]
    r = d["results"]
    assert len(r) == 1 and r[0]["bytes"] > 0 and r[0]["iterations"] > 0, r
    assert all(r[0][k] > 0 for k in want), r


if __name__ == "__main__":
    check(sys.argv[1], sys.argv[2])
    print("rdmacxx-perf --json: the expected keys, figures above 0")

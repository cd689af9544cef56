"""The device run (tools/bench --inside, under tools/softroce): environment, head to head, registration, suite."""

import os
import sys

from harness.bench import env, h2h, multirail, nodes, suite


def run(opts):
    """Everything the host run asked for, raw outputs under OPTS.out/runs; the exit status."""
    device = os.environ.get("RDMACXX_DEVICE")
    if not device:
        print("bench: bench --inside runs under tools/softroce (no RDMACXX_DEVICE)", file=sys.stderr)
        return 1
    os.makedirs(opts.runs, exist_ok=True)
    gid = env.roce_v2_gid(device)
    server = os.environ.get("RDMACXX_ADDR") or "127.0.0.1"
    client_prefix = []
    if opts.nodes == 2:
        if not os.environ.get("RDMACXX_NODES"):
            print("bench: bench --nodes 2 --inside runs under tools/softroce --nodes 2", file=sys.stderr)
            return 1
        server, node2 = nodes.addresses(os.environ["RDMACXX_NODES"])
        print(f"bench: warming the ssh connection to node 2 ({node2})")
        if not nodes.warm(node2):
            print(f"bench: ssh {node2} failed", file=sys.stderr)
            return 1
        client_prefix = nodes.client_prefix(node2)
    env.record(os.path.join(opts.out, "env.json"), opts, device, gid)
    if opts.perftest:
        h2h.run(opts, device, gid, server, client_prefix)
    if opts.rails == 2:
        multirail.run(opts)
    if opts.suite:
        if opts.has_group("reg"):
            suite.run_registration(opts)
        suite.run_suite(opts)
    print("bench: device run done")
    return 0

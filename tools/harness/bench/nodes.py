"""Across the wire (--nodes 2): servers on node 1, clients on node 2 over ssh."""

import subprocess


def addresses(nodes):
    """(node 1, node 2) from RDMACXX_NODES's text NODES ("198.18.0.1,198.18.0.2,...")."""
    parts = nodes.split(",")
    return parts[0], parts[1] if len(parts) > 1 else parts[0]


def client_prefix(node2):
    """What a client command runs after to run on NODE2: ssh, under its own timeout."""
    return ["timeout", "200", "ssh", node2]


def warm(node2):
    """The first ssh to a node takes ~10 s under emulation, later ones share its connection:
    make it now. True when it worked."""
    try:
        return subprocess.call(["timeout", "60", "ssh", node2, "true"], stdin=subprocess.DEVNULL) == 0
    except OSError:
        return False

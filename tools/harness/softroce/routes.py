"""The three routes to a device: host (one is already there), module (rdma_rxe loaded here,
rxe0 on a dummy interface) and vm (throw-away QEMU VMs), and the choice between them."""

from __future__ import annotations

import os
import re
import resource
import subprocess

from . import kernel, nodes, vm
from .common import (DEVICE, EXIT_SETUP, IFNAME, PREFIX, SIGNALS, Deadline, Exit, Options,
                     SetupError, exit_status, have, is_root, need, node_addr, output, say,
                     stop_process, want_rxe_provider)


def raise_memlock() -> None:
    """Registration pins memory: RLIMIT_MEMLOCK as high as we are allowed (in the child)."""
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY,) * 2)
    except (ValueError, OSError):
        hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
        try:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (hard, hard))
        except (ValueError, OSError):
            pass


def run_here(route: str, device: str, addr: str, opts: Options, deadline: Deadline) -> int:
    """Runs the command on this host (routes host and module), bounded by the deadline,
    with the caller's stdin; returns its exit status."""
    say(f"route {route}: device {device}" + (f", address {addr}" if addr else ""))
    env = dict(os.environ, RDMACXX_SOFTROCE_ROUTE=route, RDMACXX_DEVICE=device,
               RDMACXX_ADDR=addr, RDMACXX_RAILS="1", RDMACXX_DEVICES=device, RDMACXX_ADDRS=addr)
    process = subprocess.Popen(["timeout", "-k", "10", str(deadline.left()), *opts.command],
                               env=env, preexec_fn=raise_memlock)
    try:
        status = exit_status(process.wait())
    finally:
        with SIGNALS.deferred():
            stop_process(process, grace=5)
    deadline.check("the command")
    return status


# --- route host ----------------------------------------------------------------------------

def host_first_device() -> str:
    """The first RDMA device this host lists (ibv_devices, else rdma link), or ""."""
    if have("ibv_devices"):
        # Header "device  node GUID", then "------ ...", then one device a line.
        for line in output(["ibv_devices"]).splitlines():
            words = line.split()
            if words and words[0] != "device" and not re.fullmatch(r"-+", words[0]):
                return words[0]
    if have("rdma"):
        for line in output(["rdma", "link", "show"]).splitlines():
            if m := re.match(r"link ([^/ ]*)/", line):
                return m.group(1)
    return ""


def host_device_addr(device: str) -> str:
    """An IPv4 address of DEVICE's netdev, or ""."""
    netdev = ""
    if have("rdma"):
        for line in output(["rdma", "link", "show"]).splitlines():
            words = line.split()
            if len(words) > 1 and words[1].startswith(device + "/") and "netdev" in words[:-1]:
                netdev = words[words.index("netdev") + 1]
                break
    if not netdev:
        try:
            with open(f"/sys/class/infiniband/{device}/ports/1/gid_attrs/ndevs/0") as f:
                netdev = f.read().strip()
        except OSError:
            pass
    if not netdev or not have("ip"):
        return ""
    for line in output(["ip", "-4", "-o", "addr", "show", "dev", netdev]).splitlines():
        words = line.split()
        if len(words) > 3:
            return words[3].split("/")[0]
    return ""


def route_host(opts: Options, deadline: Deadline) -> int:
    device = host_first_device()
    if not device:
        raise SetupError("route host: this host lists no RDMA device (ibv_devices, rdma link)")
    return run_here("host", device, host_device_addr(device), opts, deadline)


# --- route module --------------------------------------------------------------------------

def quiet(*command: str) -> bool:
    """Runs COMMAND with its output hidden; True when it succeeded."""
    try:
        return subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              check=False).returncode == 0
    except OSError:
        return False


def loud(*command: str) -> bool:
    """Runs COMMAND, its messages shown; True when it succeeded."""
    try:
        return subprocess.run(command, check=False).returncode == 0
    except OSError:
        return False


def module_usable() -> bool:
    return is_root() and have("modprobe") and quiet("modprobe", "-q", "rdma_rxe")


def module_teardown() -> None:
    quiet("rdma", "link", "delete", DEVICE)
    quiet("ip", "link", "delete", IFNAME)


def module_setup() -> bool:
    """Sets up rxe0 on rxcxx0; False (after cleaning up) when a step fails. When it returns
    True the caller owns the device and must call module_teardown."""
    need("ip", "iproute2")
    need("rdma", "iproute2")
    want_rxe_provider()
    quiet("modprobe", "-q", "crc32_generic")  # else rxe may find no crc32 (ENOENT)
    if not (loud("modprobe", "rdma_rxe") and loud("modprobe", "rdma_ucm")):
        say("route module: modprobe rdma_rxe rdma_ucm failed")
        return False
    quiet("modprobe", "-q", "ib_umad")  # /dev/infiniband/umadN for rdmacxx/mad.hpp; optional
    # A run killed with SIGKILL may have left these behind.
    if quiet("rdma", "link", "show", f"{DEVICE}/1"):
        say(f"route module: {DEVICE} already exists; not touching it")
        return False
    quiet("ip", "link", "delete", IFNAME)
    with SIGNALS.deferred():
        ok = (loud("ip", "link", "add", IFNAME, "type", "dummy")
              and loud("ip", "addr", "add", f"{node_addr(1)}/{PREFIX}", "dev", IFNAME)
              and loud("ip", "link", "set", IFNAME, "up")
              and loud("rdma", "link", "add", DEVICE, "type", "rxe", "netdev", IFNAME))
        if not ok:
            say(f"route module: could not create {DEVICE} on {IFNAME}")
            module_teardown()
    return ok


def run_module(opts: Options, deadline: Deadline) -> int:
    """The command on the rxe0 module_setup made, which is removed again afterwards."""
    try:
        return run_here("module", DEVICE, node_addr(1), opts, deadline)
    finally:
        with SIGNALS.deferred():
            module_teardown()


# --- route vm ------------------------------------------------------------------------------

def route_vm(opts: Options, deadline: Deadline) -> int:
    """One VM, or opts.nodes VMs on a virtual switch."""
    with kernel.prepare(deadline) as boot:
        if opts.nodes > 1:
            return nodes.run_nodes(boot, opts, deadline)
        return vm.run_one(boot, opts, deadline)


# --- the choice ----------------------------------------------------------------------------

def run(opts: Options, deadline: Deadline) -> int:
    """Runs the command on the route opts.route asks for (auto: the first that works)."""
    if opts.route == "host":
        return route_host(opts, deadline)
    if opts.route == "vm":
        return route_vm(opts, deadline)
    if opts.route == "module":
        if not is_root():
            raise SetupError("route module: needs root")
        if not module_usable():
            raise SetupError(f"route module: 'modprobe rdma_rxe' fails "
                             f"(no /lib/modules/{os.uname().release}?)")
        if not module_setup():
            raise Exit(EXIT_SETUP)
        return run_module(opts, deadline)
    # auto
    if host_first_device():
        return route_host(opts, deadline)
    if module_usable():
        if module_setup():
            return run_module(opts, deadline)
        if not opts.keep_going:
            raise SetupError(f"route module: setting up {DEVICE} failed "
                             "(--keep-going would go on with the VM)")
        say("route module failed; going on with route vm (--keep-going)")
    return route_vm(opts, deadline)

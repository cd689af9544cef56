"""Several nodes (--nodes N, route vm): N VMs booted in parallel on one vde_switch, ssh
between them with keys and configuration made for the run, the command on node 1.

Node K has rxe0 on eth0 with 198.18.0.K/24 (with --rails 2 also rxe1 on eth1, 198.18.1.K/24, on
a second switch) and the names nodeK and softrocek (the run's
hosts file, bound over /etc/hosts inside the VMs). Each node runs the host's sshd with the
run's host key and guest/sshd_config.in; $RDMACXX_SSH (bin/ssh in the run folder, first in
the command's PATH) uses guest/ssh_config.in.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .common import (DEVICE, EXIT_SETUP, Deadline, Exit, Options, SetupError, need, node_addr,
                     rail_device, rail_list, rail_netdev, say)
from .console import Console
from .kernel import GUEST_DIR, BootFiles
from .switch import Switch
from .vm import (Vm, qemu_args, read_status, run_folder, show_tail, stop_all, vm_cpus,
                 write_run_files)


def render(template: str, **values: str) -> str:
    """guest/TEMPLATE with every @NAME@ replaced by values[NAME]."""
    text = (GUEST_DIR / template).read_text()

    def value(m: re.Match) -> str:
        if m.group(1) not in values:
            raise KeyError(f"{template}: no value for @{m.group(1)}@")
        return values[m.group(1)]
    return re.sub(r"@([A-Z_]+)@", value, text)


def node_list(nodes: int) -> str:
    """RDMACXX_NODES: 198.18.0.1,198.18.0.2,..."""
    return ",".join(node_addr(k) for k in range(1, nodes + 1))


def keygen(path: Path, comment: str) -> None:
    if subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f",
                       str(path)], stdin=subprocess.DEVNULL, check=False).returncode != 0:
        raise SetupError("ssh-keygen failed")


def write_ssh_files(run: Path, nodes: int, path_env: str, rails: int = 1) -> None:
    """ssh/ (a user key and one host key, both new for each run; known_hosts,
    authorized_keys, ssh_config, sshd_config.K), bin/ssh, hosts and empty."""
    ssh = run / "ssh"
    ssh.mkdir(mode=0o700)
    (run / "bin").mkdir(mode=0o700)
    keygen(ssh / "id", f"softroce-{run.name}")
    keygen(ssh / "host", "softroce-host")
    shutil.copyfile(ssh / "id.pub", ssh / "authorized_keys")
    names = ",".join(f"{node_addr(k)},node{k},softroce{k}" for k in range(1, nodes + 1))
    host_key = " ".join((ssh / "host.pub").read_text().split()[:2])
    (ssh / "known_hosts").write_text(f"{names} {host_key}\n")
    (ssh / "ssh_config").write_text(render("ssh_config.in", RUN=str(run), SSH_DIR=str(ssh)))
    (run / "empty").write_text("")
    # Commands over ssh get the caller's PATH, as the command on node 1 does.
    path = f"{run}/bin:{path_env}"
    for k in range(1, nodes + 1):
        (ssh / f"sshd_config.{k}").write_text(render(
            "sshd_config.in", NODE=str(k), ADDR=node_addr(k), SSH_DIR=str(ssh), PATH=path,
            NODES=node_list(nodes), DEVICE=DEVICE, RUN=str(run), RAILS=str(rails),
            DEVICES=rail_list(k, rails, lambda _, r: rail_device(r)),
            ADDRS=rail_list(k, rails, node_addr)))
    wrapper = run / "bin/ssh"
    wrapper.write_text(render("ssh.in", SSH=shlex.quote(shutil.which("ssh") or "ssh"),
                              SSH_CONFIG=shlex.quote(str(ssh / "ssh_config"))))
    wrapper.chmod(0o755)
    # The guests' /etc/hosts: the host's, and the nodes.
    try:
        hosts = Path("/etc/hosts").read_text()
    except OSError:
        hosts = ""
    hosts += "# softroce nodes\n" + "".join(f"{node_addr(k)} node{k} softroce{k}\n"
                                           for k in range(1, nodes + 1))
    (run / "hosts").write_text(hosts)


def check_tools() -> None:
    for command, package in (("vde_switch", "vde2"), ("sshd", "openssh-server"),
                             ("ssh", "openssh-client"), ("ssh-keygen", "openssh-client")):
        need(command, package)


class NodesUp:
    """Node 1's begin marker: every node is up; prints how long that took."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.start = time.monotonic()

    def __call__(self) -> None:
        say(f"{self.nodes} nodes up in {time.monotonic() - self.start:.1f} s "
            f"(booted in parallel; {vm_cpus(self.nodes)} CPU each)")


def wait_nodes(run: Path, vms: list[Vm], opts: Options, deadline: Deadline) -> None:
    """Returns when node 1 has stopped. Another node stopping before it was up fails the run
    (125); after that it is what the command asked for (a fault test powering a node off),
    and is reported."""
    others = vms[1:]
    while not vms[0].finished():
        for vm in [vm for vm in others if vm.finished()]:
            others.remove(vm)
            deadline.check("the VMs")
            if (run / f"ready.{vm.node}").exists():
                say(f"node {vm.node} powered off while the command runs "
                    f"(qemu exit status {vm.status()})")
                continue
            say(f"node {vm.node} stopped before it was up (qemu exit status {vm.status()}); "
                "its last console lines:")
            show_tail(vm.console.tail(), f"[node{vm.node}] ")
            if not opts.verbose:
                say("(--verbose shows the whole boot of every node)")
            raise Exit(EXIT_SETUP)
        time.sleep(0.1)


def report_node1_failure(run: Path, vm: Vm, opts: Options) -> None:
    say(f"node 1 stopped before the command finished (qemu exit status {vm.status()}); "
        "last console lines:")
    show_tail(vm.console.tail())
    for k in range(1, opts.nodes + 1):
        try:
            log = (run / f"sshd.{k}.log").read_text(errors="replace")
        except OSError:
            continue
        show_tail(log.splitlines(), f"[node{k}] sshd: ")
    if not opts.verbose:
        say("(--verbose shows the whole boot of every node)")


def run_nodes(boot: BootFiles, opts: Options, deadline: Deadline) -> int:
    """opts.nodes VMs on one switch, booted in parallel; the command runs on node 1 once
    every node is up; the exit status is node 1's. Every VM and the switch are stopped, and
    the run folder removed, however this ends."""
    check_tools()
    with run_folder(boot) as run:
        write_ssh_files(run, opts.nodes, os.environ.get("PATH", ""), opts.rails)
        # One switch per rail: rail 0's socket is vde/ as before, rail R's vdeR/.
        switches = [Switch(run, "vde" if r == 0 else f"vde{r}") for r in range(opts.rails)]
        vms: list[Vm] = []
        try:
            for switch in switches:
                switch.start()
            addrs = node_list(opts.nodes)
            each = " and ".join(f"{rail_device(r)} on {rail_netdev(r, opts.nodes)}" for r in range(opts.rails))
            say(f"route vm: {opts.nodes} nodes {addrs}, each with {each} "
                f"(Debian kernel {boot.kver}, QEMU TCG, {opts.rails} vde_switch"
                f"{'es' if opts.rails > 1 else ''})")
            up = NodesUp(opts.nodes)
            left = deadline.left()
            for k in range(opts.nodes, 0, -1):
                write_run_files(run, k, opts, addrs)
                log = run / f"console.{k}.log"
                console = Console(run.name, k, log, sys.stdout.buffer, opts.verbose,
                                  up if k == 1 else None)
                vm = Vm(k, qemu_args(boot, run, k, opts.nodes, opts.verbose,
                                     [s.socket for s in switches]), console)
                vms.insert(0, vm)
                vm.start(left)
            wait_nodes(run, vms, opts, deadline)
        finally:
            stop_all(vms)
            for switch in switches:
                switch.stop()
        status = read_status(run, "node 1")
        if status is not None:
            return status
        deadline.check("the VMs")
        report_node1_failure(run, vms[0], opts)
        raise Exit(EXIT_SETUP)

"""One throw-away QEMU VM: its run folder (params read by the guest init, the command
script, the exit status), its QEMU command line, the process and its console, and the
cleanup that every way out of a run goes through.

Run folder ($CACHE/runs/run.XXXXXX, its name the run's nonce): params (params.K for node K
of several), cmd.sh (node 1's command), clock, status (the command's exit status, written by
the guest), console.log (console.K.log); with several nodes also ssh/, bin/ssh, hosts,
empty, ready.K, sshd.K.log and the switch's vde/ socket (see nodes.py and switch.py).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from .common import (DEVICE, EXIT_SETUP, PREFIX, SIGNALS, Deadline, Exit, Options, SetupError,
                     exit_status, make_temp_dir, node_addr, rail_device, rail_list, rail_netdev,
                     say, stop_process)
from .console import Console
from .kernel import BootFiles

# Not passed to the command in the VM: what names this host's session or would be wrong there.
_NOT_PASSED = re.compile(
    r"PWD|OLDPWD|SHLVL|_|HOSTNAME|SHELLOPTS|BASHOPTS|BASH_.*|COLUMNS|LINES"
    r"|DISPLAY|WAYLAND_DISPLAY|XAUTHORITY|XDG_RUNTIME_DIR|DBUS_SESSION_BUS_ADDRESS"
    r"|SSH_AUTH_SOCK|SSH_AGENT_PID|GPG_AGENT_INFO|TMUX|TMUX_PANE|STY"
    r"|INVOCATION_ID|JOURNAL_STREAM|NOTIFY_SOCKET|LISTEN_FDS|LISTEN_PID|LISTEN_FDNAMES"
    r"|RDMACXX_DEVICE|RDMACXX_ADDR|RDMACXX_SOFTROCE_ROUTE|RDMACXX_RAILS|RDMACXX_DEVICES"
    r"|RDMACXX_ADDRS")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

STOP_GRACE = 10  # seconds QEMU gets to stop on SIGTERM before SIGKILL


def which(command: str, fallback: str = "") -> str:
    return shutil.which(command) or fallback or command


def passed_env(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """The environment the command gets: the caller's, less what names this host's session
    or would be wrong inside the VM; sorted by name."""
    return sorted((name, value) for name, value in environ.items()
                  if _NAME.fullmatch(name) and not _NOT_PASSED.fullmatch(name))


def keep_tmp(cwd: str) -> str:
    """The VM's /tmp is new: a caller working under /tmp gets that top folder bound in."""
    return "/tmp/" + cwd.split("/")[2] if cwd.startswith("/tmp/") else ""


def params_text(run: Path, node: int, nodes: int, cwd: str, rails: int = 1) -> str:
    """The params file the guest init sources (params, or params.NODE of several nodes)."""
    uid, gid = os.geteuid(), os.getegid()
    groups = [gid] + [g for g in os.getgroups() if g != gid]
    values = [
        ("NONCE", run.name), ("NODE", node), ("NODES", nodes), ("NODE_NAME", f"softroce{node}"),
        ("NODE_ADDR", node_addr(node)), ("NODE_PREFIX", PREFIX),
        # a dummy interface for one node, eth0 between several
        ("NETDEV", rail_netdev(0, nodes)),
        ("DEVICE", DEVICE),
        # every rail's interface and address, rail 0 first (NETDEV, NODE_ADDR); its device is rxeR
        ("RAILS", rails), ("RAIL_NETDEVS", " ".join(rail_netdev(r, nodes) for r in range(rails))),
        ("RAIL_ADDRS", " ".join(node_addr(node, r) for r in range(rails))),
        ("KEEP_TMP", keep_tmp(cwd)),
        ("RUN_UID", uid), ("RUN_GID", gid), ("RUN_GROUPS", ",".join(map(str, groups))),
        ("HOST_RDMA", which("rdma")), ("HOST_SETPRIV", which("setpriv")),
        ("HOST_ENV", which("env", "/usr/bin/env")), ("HOST_BASH", which("bash", "/bin/bash")),
    ]
    if nodes > 1:
        values += [("HOST_SSHD", which("sshd")),
                   ("HIDE_BASHRC", f"{pwd.getpwuid(uid).pw_dir}/.bashrc")]
    return "# softroce run parameters, read by the guest init\n" + "".join(
        f"{name}={shlex.quote(str(value))}\n" for name, value in values)


def cmd_script(run: Path, command: Sequence[str], cwd: str, environ: Mapping[str, str],
               nodes: int, node_list: str = "", rails: int = 1) -> str:
    """cmd.sh: node 1 runs it with the host's bash under `env -i`: the caller's environment,
    directory and command."""
    q = shlex.quote
    lines = ["# softroce: the caller's environment, directory and command"]
    lines += [f"export {name}={q(value)}" for name, value in passed_env(environ)]
    lines.append(f"export RDMACXX_DEVICE={DEVICE} RDMACXX_ADDR={node_addr(1)} "
                 "RDMACXX_SOFTROCE_ROUTE=vm")
    lines.append(f"export RDMACXX_RAILS={rails} "
                 f"RDMACXX_DEVICES={rail_list(1, rails, lambda _, r: rail_device(r))} "
                 f"RDMACXX_ADDRS={rail_list(1, rails, node_addr)}")
    if nodes > 1:
        ssh = q(f"{run}/bin/ssh")
        lines.append(f"export RDMACXX_NODE=1 RDMACXX_NODES={q(node_list)} RDMACXX_SSH={ssh} "
                     f"OMPI_MCA_plm_rsh_agent={ssh}")
        lines.append(f'export PATH={q(f"{run}/bin")}:"$PATH"')
    lines.append('[[ -z ${TMPDIR:-} || -d $TMPDIR ]] || mkdir -p -- "$TMPDIR"')
    lines.append(f"cd -- {q(cwd)} || exit 125")
    lines.append(f"command -v -- {q(command[0])} >/dev/null || "
                 f'{{ printf "softroce: %s: command not found\\n" {q(command[0])} >&2; '
                 "exit 127; }")
    lines.append("exec " + " ".join(q(word) for word in command))
    return "\n".join(lines) + "\n"


def write_run_files(run: Path, node: int, opts: Options, node_list: str = "") -> None:
    """params (params.NODE with several nodes) and, for node 1, cmd.sh."""
    cwd = os.path.realpath(os.getcwd())
    program = opts.command[0]
    if node == 1 and program.startswith("/tmp/"):
        program_tmp = keep_tmp(program)
        if program_tmp != keep_tmp(cwd):
            # A program under another folder of /tmp is not there in the VM: say so first.
            say(f"warning: {program} is under /tmp, which the VM replaces with a fresh tmpfs "
                "(keeping only the working directory's folder under /tmp): run from "
                f"{program_tmp}, or put the program elsewhere")
    params = run / (f"params.{node}" if opts.nodes > 1 else "params")
    params.write_text(params_text(run, node, opts.nodes, cwd, opts.rails))
    if node == 1:
        (run / "cmd.sh").write_text(
            cmd_script(run, opts.command, cwd, os.environ, opts.nodes, node_list, opts.rails),
            errors="surrogateescape")


def vm_cpus(nodes: int) -> str:
    """CPUs of each VM. Several nodes: 1 each. TCG vCPUs of several VMs starve each other on
    a 2-core host (Open MPI's daemons then miss their TCP handshakes); one each boots as
    fast."""
    return os.environ.get("RDMACXX_SOFTROCE_CPUS") or ("1" if nodes > 1 else "2")


def qemu_args(boot: BootFiles, run: Path, node: int, nodes: int, verbose: bool,
              switches: Sequence[Path] = (), epoch: int | None = None) -> list[str]:
    """The QEMU command line of one node. With several nodes each gets a virtio-net NIC per
    switch (the first is eth0 in the guest, MAC 52:54:00:c6:12:0K) on the run's vde_switch,
    whose Unix socket is the only thing the virtual Ethernet touches on the host. No option
    ROM (romfile=): iPXE would only slow the firmware down."""
    epoch = int(time.time()) if epoch is None else epoch
    append = f"console=ttyS0 panic=-1 mitigations=off softroce_run={run} softroce_epoch={epoch}"
    if nodes > 1:
        # no_timer_check: the kernel's IO-APIC timer check panics ("IO-APIC + timer doesn't
        # work") when a starved TCG vCPU misses its ticks, as several VMs on 2 cores do.
        append += f" softroce_node={node} no_timer_check"
    if verbose:
        append += " softroce_verbose=1"
    else:
        append = f"quiet loglevel=1 {append}"  # loglevel 1: panics only
    args = ["qemu-system-x86_64",
            "-accel", "tcg,thread=multi", "-cpu", "max",
            "-smp", vm_cpus(nodes), "-m", os.environ.get("RDMACXX_SOFTROCE_MEMORY") or "2G",
            "-nographic", "-no-reboot", "-nic", "none",
            "-kernel", str(boot.kernel), "-initrd", str(boot.initrd), "-append", append,
            "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,multidevs=remap"]
    for i, socket in enumerate(switches):
        args += ["-netdev", f"vde,id=n{i},sock={socket}",
                 "-device", f"virtio-net-pci,netdev=n{i},mac=52:54:00:c6:{0x12 + i:02x}:"
                            f"{node:02x},romfile="]
    return args


class Vm:
    """One QEMU process under timeout(1) (so that it stops at the deadline even if softroce
    itself is killed), its console read by a thread."""

    def __init__(self, node: int, args: list[str], console: Console) -> None:
        self.node = node
        self.args = args
        self.console = console
        self.process: subprocess.Popen | None = None
        self.reader: threading.Thread | None = None

    def start(self, seconds: int) -> None:
        self.process = subprocess.Popen(["timeout", "-k", "5", str(seconds), *self.args],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT)
        self.reader = threading.Thread(target=self.console.run, args=(self.process.stdout,),
                                       name=f"console-{self.node}", daemon=True)
        self.reader.start()

    def finished(self) -> bool:
        """QEMU has stopped and its console is read to the end."""
        return (self.process is not None and self.process.poll() is not None
                and (self.reader is None or not self.reader.is_alive()))

    def status(self) -> str:
        """QEMU's exit status (through timeout(1)), or "?"."""
        if self.process is None or self.process.returncode is None:
            return "?"
        return str(exit_status(self.process.returncode))

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, STOP_GRACE)
        if self.reader is not None:
            self.reader.join(5)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()


@contextlib.contextmanager
def run_folder(boot: BootFiles) -> Iterator[Path]:
    """A new run folder, removed when the block ends however it ends."""
    run = make_temp_dir(boot.cache / "runs", "run.")
    try:
        yield run
    finally:
        with SIGNALS.deferred():
            shutil.rmtree(run, ignore_errors=True)


def stop_all(vms: Sequence[Vm]) -> None:
    """Powers off whatever still runs (SIGTERM to every QEMU first, then the waiting)."""
    with SIGNALS.deferred():
        for vm in vms:
            if vm.process is not None and vm.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    vm.process.terminate()
        for vm in vms:
            vm.stop()


def read_status(run: Path, source: str) -> int | None:
    """The command's exit status the guest wrote, or None if it wrote none."""
    try:
        text = (run / "status").read_text()
    except OSError:
        return None
    if not text:
        return None
    text = text.rstrip("\n")
    if not re.fullmatch(r"[0-9]+", text):
        raise SetupError(f"unreadable exit status '{text}' from {source}")
    return int(text)


def show_tail(lines: list[str], prefix: str = "") -> None:
    for line in lines:
        sys.stderr.write(f"{prefix}{line}\n")
    sys.stderr.flush()


def run_one(boot: BootFiles, opts: Options, deadline: Deadline) -> int:
    """The vm route with one node: rxe0 on a dummy interface, 198.18.0.1."""
    with run_folder(boot) as run:
        write_run_files(run, 1, opts)
        console = Console(run.name, 1, run / "console.log", sys.stdout.buffer, opts.verbose)
        vm = Vm(1, qemu_args(boot, run, 1, 1, opts.verbose), console)
        devices = ", ".join(f"{rail_device(r)} {node_addr(1, r)}" for r in range(opts.rails))
        say(f"route vm: device{'s' if opts.rails > 1 else ''} {devices} "
            f"(Debian kernel {boot.kver}, QEMU TCG)")
        try:
            vm.start(deadline.left())
            while not vm.finished():
                time.sleep(0.1)
        finally:
            stop_all([vm])
        status = read_status(run, "the VM")
        if status is not None:
            return status
        deadline.check("the VM")
        say(f"the VM stopped before the command finished (qemu exit status {vm.status()}); "
            "last console lines:")
        show_tail(console.tail())
        if not opts.verbose:
            say("(--verbose shows the whole boot)")
        raise Exit(EXIT_SETUP)

"""softroce — run a command where a real RDMA device exists.

Usage:
  tools/softroce [--timeout SECONDS] [--nodes N] [--rails R] [--route auto|host|module|vm]
                 [--keep-going] [--verbose] -- COMMAND [ARGS...]

Routes (--route auto, the default, takes the first one that works):
  host    this host already lists an RDMA device (ibv_devices, else rdma link):
          COMMAND runs here, on the first device listed.
  module  we are root and `modprobe rdma_rxe` works: a dummy interface rxcxx0 gets
          198.18.0.1/24, Soft-RoCE device rxe0 is put on it, COMMAND runs, and both
          are removed again on the way out.
  vm      a throw-away QEMU VM (TCG, no KVM) boots Debian's own kernel with a tiny
          busybox initramfs, mounts this host's / over 9p read-write, chroots into it
          and creates rxe0 on a dummy interface with 198.18.0.1/24. COMMAND runs there,
          as the caller's uid, in the caller's directory, with the caller's
          environment; the VM is powered off afterwards.

Several nodes (--nodes N, 2 <= N <= 4; route vm only):
  N VMs boot in parallel (one vCPU each unless RDMACXX_SOFTROCE_CPUS says otherwise) on one
  virtual Ethernet segment: a vde_switch (Debian's vde2) on a Unix socket in the run folder,
  each VM's virtio-net NIC plugged in with QEMU's `-netdev vde`; nothing touches the host's
  network interfaces. Node K has rxe0 on eth0 with 198.18.0.K/24 (GID 1 is the RoCE v2 GID
  ::ffff:198.18.0.K) and the name nodeK (a per-run /etc/hosts bound over the host's one
  inside the VMs). COMMAND runs on node 1 once all nodes are up; softroce prints how long
  that took. Node 1's output streams as is; the other nodes' consoles, after their boot,
  prefixed "[nodeK] ". The exit status is node 1's. Every VM and the switch are stopped on
  exit, on failure, on timeout and on Ctrl-C. A node other than 1 that stops before it is
  up fails the run (125); one powered off later (a fault test) is only reported.
  Each node runs sshd (the host's binary) with a key pair and host key made for the run,
  its configuration in the run folder (the host's /etc/ssh and ~/.ssh are neither read nor
  written); $RDMACXX_SSH, also first in COMMAND's PATH as `ssh`, uses them, so
  `ssh node2 CMD` (or ssh 198.18.0.2 CMD) just works, and so does mpirun (through
  OMPI_MCA_plm_rsh_agent):
    mpirun --allow-run-as-root -H 198.18.0.1,198.18.0.2 -np 2 \\
      --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include eth0 PROGRAM
  Commands over ssh get the caller's PATH and the RDMACXX_* variables of their node; the
  caller's ~/.bashrc is hidden in the VMs (an empty file bound over it): a shell started by
  sshd reads it, and pyenv-style setup there costs tens of seconds under emulation. One
  connection per node is shared (ControlMaster): the first ssh to a node takes ~10 s
  under emulation, later ones 1-3 s.
  Faults, from COMMAND: `ssh node2 'ip link set eth0 down; sleep 5; ip link set eth0 up'`
  (the ssh session survives the gap; rxe0 there goes DOWN, then ACTIVE); packet loss with
  `ssh node2 tc qdisc add dev eth0 root netem loss 5%` (sch_netem; acts on what node 2
  sends; `tc qdisc del dev eth0 root` removes it); `ssh node2 'echo o >/proc/sysrq-trigger'`
  powers node 2 off.

Several rails (--rails 2; route vm only): every node gets R RDMA devices (rails), each on
a network of its own, as nodes with several NICs have. Rail R's device is rxeR with address
198.18.R.K on node K: on one node rxeR sits on a dummy interface rxcxxR (each device reaches
itself only: Soft-RoCE does not carry traffic between two devices of one host), between several
nodes on ethR, the NIC on rail R's own vde_switch. A fault on one rail only:
`ssh node2 'ip link set eth1 down'` (rxe1 there goes DOWN: its port's async event
IBV_EVENT_PORT_ERR; back up, IBV_EVENT_PORT_ACTIVE), or on one node `ip link set rxcxx1 down`.
One rail (the default) is exactly the single-NIC run.

COMMAND sees:
  RDMACXX_DEVICE          the device to use (rxe0, or the host's first device)
  RDMACXX_ADDR            an IPv4 address on that device's netdev ("" if it has none)
  RDMACXX_SOFTROCE_ROUTE  host, module or vm
  RDMACXX_RAILS           the number of rails (1 unless --rails)
  RDMACXX_DEVICES         this node's devices, one per rail (rxe0, or rxe0,rxe1)
  RDMACXX_ADDRS           this node's address on each rail (198.18.0.K, or 198.18.0.K,198.18.1.K)
  RDMACXX_NODES           several nodes: their addresses, 198.18.0.1,198.18.0.2,...
                          (on rail R: 198.18.R.1,198.18.R.2,...)
  RDMACXX_NODE            several nodes: this node's number (1 for COMMAND)
  RDMACXX_SSH             several nodes: ssh wrapper for the run's keys (also `ssh` in PATH)
  OMPI_MCA_plm_rsh_agent  several nodes: the same wrapper, for mpirun

Exit status: COMMAND's own status (127: not found); 124 when --timeout (default 1800 s,
covering the whole run, downloads and boot included) ran out; 125 when softroce itself
could not set up a device or run COMMAND; 2 for a usage error. softroce's own messages
go to stderr, prefixed "softroce:".

Options:
  --timeout SECONDS  bound on the whole run (default 1800)
  --nodes N          number of nodes, 1 (default) to 4; more than 1 means route vm
  --rails R          RDMA devices (rails) per node, 1 (default) or 2; more than 1 means route vm
  --route R          auto (default), host, module or vm
  --keep-going       auto mode: when a route passed its probe (a device listed;
                     modprobe rdma_rxe works) but setting it up then failed, clean up
                     and go on with the next route; without it softroce stops there
                     (exit 125), so a broken host setup is not hidden behind a slow VM
  --verbose          vm route: also show the boot console, kernel messages and the
                     guest init's steps with their times

Environment:
  RDMACXX_SOFTROCE_CACHE   cache folder (default /var/cache/rdmacxx/softroce; for a
                           non-root caller who cannot write there, ~/.cache/rdmacxx/softroce).
                           It must not be under /tmp: the VM mounts a fresh tmpfs there.
  RDMACXX_SOFTROCE_MEMORY  VM memory (default 2G)
  RDMACXX_SOFTROCE_CPUS    CPUs of each VM (default 2; 1 with several nodes: TCG vCPUs of
                           several VMs starve each other on a 2-core host)

Cache layout (vm route):
  $CACHE/lock                          flock: every run holds it shared; pruning takes it
                                       exclusively, and only when nobody else runs
  $CACHE/kernels/KVER/*.deb            the kernel package, kept so the initramfs can be
                                       rebuilt without downloading again
  $CACHE/kernels/KVER/boot-HASH/kernel      the kernel: the ELF image unpacked from
                                       Debian's vmlinuz (QEMU boots it by PVH, seconds
                                       sooner than the self-decompressing vmlinuz)
  $CACHE/kernels/KVER/boot-HASH/initrd.img  busybox + modules + the guest init; HASH
                                       covers the guest files (tools/harness/softroce/
                                       guest/: the init, the ssh configuration), the
                                       module list, busybox and the code that unpacks
                                       the kernel and builds the initramfs
  $CACHE/runs/run.XXXXXX/              one run's files (command script, parameters,
                                       exit status; with several nodes also params.K,
                                       console.K.log, ssh/ keys and configs, bin/ssh,
                                       hosts, the switch's vde/ socket), removed when
                                       the run ends

Notes on the vm route:
  - With a warm cache the VM boots and has rxe0 in about 5 s on an idle 2-core host
    (kernel unpacked for PVH boot, busybox initramfs); a cold cache adds the kernel
    download and about 10 s of unpacking. Under emulation rxe gives ~11 us send
    latency: fine for function, not for absolute speed.
  - The command's stdout and stderr are merged and streamed through the serial console;
    its stdin is /dev/null. Kernel messages and the boot are hidden unless --verbose.
    The emulated serial port carries roughly 250 KB/s: fine for test logs, slow for
    megabytes (write those to a file instead).
  - /tmp in the VM is a fresh tmpfs (if the caller's directory is under /tmp, that
    directory tree is bound in from the host so it is still there).
  - Missing packages are installed with apt-get when running as root; otherwise
    softroce names the package to install.

Code: tools/harness/softroce/ (cli: this text and the command line; routes: host, module,
vm; kernel: the boot files and the cache; vm: one VM, its run folder and QEMU; console: the
serial consoles; switch: the vde_switch; nodes: several VMs and ssh between them; guest/:
the guest init and the ssh configuration templates). Unit tests: cd tools &&
/usr/bin/python3 -m unittest discover -s harness/tests -t .
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from collections.abc import Sequence

from . import routes
from .common import (EXIT_SETUP, MAX_NODES, MAX_RAILS, SIGNALS, Deadline, Exit, Options,
                     UsageError, say)

_VALUED = ("--timeout", "--nodes", "--rails", "--route")


def parse_args(argv: Sequence[str]) -> Options | None:
    """The command line (without the program's name); None for --help. Options end at "--"
    or at the first word that is not one. Raises UsageError."""
    values = {"--timeout": "1800", "--nodes": "1", "--rails": "1", "--route": "auto"}
    keep_going = verbose = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if name in _VALUED:
            if "=" in arg:
                values[name] = arg.split("=", 1)[1]
                i += 1
            else:
                if i + 1 >= len(argv):
                    raise UsageError(f"{arg} needs a value")
                values[name] = argv[i + 1]
                i += 2
        elif arg == "--keep-going":
            keep_going = True
            i += 1
        elif arg in ("-v", "--verbose"):
            verbose = True
            i += 1
        elif arg in ("-h", "--help"):
            return None
        elif arg == "--":
            i += 1
            break
        elif arg.startswith("-"):
            raise UsageError(f"unknown option {arg}")
        else:
            break
    command = list(argv[i:])
    if not command:
        raise UsageError("no command given")
    timeout, nodes, route = values["--timeout"], values["--nodes"], values["--route"]
    rails = values["--rails"]
    if not re.fullmatch(r"[1-9][0-9]*", timeout):
        raise UsageError(f"--timeout wants a positive number of seconds, not '{timeout}'")
    if not re.fullmatch(r"[1-9][0-9]*", nodes):
        raise UsageError(f"--nodes wants a positive number, not '{nodes}'")
    if route not in ("auto", "host", "module", "vm"):
        raise UsageError("--route must be auto, host, module or vm")
    if not re.fullmatch(r"[1-9][0-9]*", rails):
        raise UsageError(f"--rails wants a positive number, not '{rails}'")
    if int(nodes) > MAX_NODES:
        raise UsageError(f"--nodes: at most {MAX_NODES} nodes, not {nodes}")
    if int(rails) > MAX_RAILS:
        raise UsageError(f"--rails: at most {MAX_RAILS} rails, not {rails}")
    if int(nodes) > 1:
        # Several nodes exist only as VMs.
        if route == "auto":
            route = "vm"
        elif route != "vm":
            raise UsageError(f"--nodes {nodes} needs route vm (several VMs on one virtual "
                             "switch)")
    if int(rails) > 1:
        # So do several devices per node (the host's own devices or one module device are one).
        if route == "auto":
            route = "vm"
        elif route != "vm":
            raise UsageError(f"--rails {rails} needs route vm (a device and a network per rail)")
    return Options(command=command, timeout=int(timeout), nodes=int(nodes), rails=int(rails),
                   route=route, keep_going=keep_going, verbose=verbose)


def undo_locale_coercion() -> None:
    """Python sets LC_CTYPE=C.UTF-8 in its own environment when it starts in the C locale
    (PEP 538): the command must get the caller's environment as it was."""
    try:
        with open("/proc/self/environ", "rb") as f:
            initial = f.read().split(b"\0")
    except OSError:
        return
    if not any(entry.startswith(b"LC_CTYPE=") for entry in initial):
        os.environ.pop("LC_CTYPE", None)


def main(argv: Sequence[str] | None = None) -> int:
    """softroce's exit status for the command line ARGV (default sys.argv[1:])."""
    undo_locale_coercion()
    SIGNALS.install()
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
        if opts is None:
            sys.stdout.write(__doc__)
            return 0
        return routes.run(opts, Deadline(opts.timeout))
    except Exit as e:
        if e.message:
            say(e.message)
        return e.status
    except Exception:  # a bug: say so, as a setup failure
        say("internal error:")
        traceback.print_exc()
        return EXIT_SETUP

"""What every part of softroce shares: messages, exit statuses, the deadline, signals,
and finding or installing the programs it needs.

softroce's own messages go to stderr, each line prefixed "softroce: ". A failure is an
exception carrying its exit status; cli.main turns it into the message and the status.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

PROG = "softroce"

# Exit statuses of softroce itself (otherwise the command's own).
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_SETUP = 125
EXIT_NOT_FOUND = 127

DEVICE = "rxe0"          # the Soft-RoCE device softroce creates
IFNAME = "rxcxx0"        # route module and one VM: the dummy interface rxe0 sits on
PREFIX = 24              # of every address softroce gives
MAX_NODES = 4
MAX_RAILS = 2            # rails per node (--rails): a device and a network of its own each
USAGE = ("usage: tools/softroce [--timeout S] [--nodes N] [--rails R] [--route auto|host|module|vm] "
         "[--keep-going] [--verbose] -- COMMAND [ARGS...]")


def node_addr(node: int, rail: int = 0) -> str:
    """Node NODE's address on rail RAIL: 198.18.RAIL.NODE (RFC 2544's benchmarking range)."""
    return f"198.18.{rail}.{node}"


def rail_device(rail: int) -> str:
    """The Soft-RoCE device of rail RAIL: rxe0, rxe1, ..."""
    return f"rxe{rail}"


def rail_netdev(rail: int, nodes: int) -> str:
    """The interface rail RAIL's device sits on in a VM: a dummy one (rxcxx0, rxcxx1, ...) for
    one node, the NIC on rail RAIL's switch (eth0, eth1, ...) between several."""
    return f"eth{rail}" if nodes > 1 else f"rxcxx{rail}"


def rail_list(node: int, rails: int, what) -> str:
    """Comma-separated WHAT(rail) of node NODE's rails: RDMACXX_DEVICES, RDMACXX_ADDRS."""
    return ",".join(what(node, r) for r in range(rails))


def say(message: str) -> None:
    """Prints "softroce: MESSAGE" to stderr."""
    for line in message.splitlines() or [""]:
        print(f"{PROG}: {line}", file=sys.stderr, flush=True)


class Exit(BaseException):
    """Ends softroce with STATUS after printing MESSAGE (if any). A BaseException, so that
    no `except Exception` on the way swallows it; every cleanup on the way runs."""

    def __init__(self, status: int, message: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class UsageError(Exit):
    """A bad command line: exit 2 after the message and the usage line."""

    def __init__(self, message: str) -> None:
        super().__init__(EXIT_USAGE, f"{message}\n{USAGE}")


class SetupError(Exit):
    """softroce itself could not set up a device or run the command: exit 125."""

    def __init__(self, message: str) -> None:
        super().__init__(EXIT_SETUP, message)


class TimedOut(Exit):
    """--timeout ran out: exit 124."""

    def __init__(self, timeout: int, what: str) -> None:
        super().__init__(EXIT_TIMEOUT, f"timed out after {timeout} s (--timeout); stopped {what}")


class Interrupted(Exit):
    """SIGINT or SIGTERM reached softroce: exit 130 or 143 once everything is cleaned up."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


class Deadline:
    """The bound on the whole run (--timeout), downloads and boot included."""

    def __init__(self, seconds: int, clock=time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._end = clock() + seconds

    def left(self) -> int:
        """Whole seconds left, rounded up and at least 1 (for timeout(1)): a timeout(1)
        given this runs out no sooner than the deadline, so expired() is then true."""
        return max(1, math.ceil(self._end - self._clock()))

    def expired(self) -> bool:
        return self._clock() >= self._end

    def check(self, what: str) -> None:
        """Raises TimedOut (stopped WHAT) when the deadline has passed."""
        if self.expired():
            raise TimedOut(self.seconds, what)


class Signals:
    """SIGINT and SIGTERM: the first one prints "interrupted (SIGINT)" and raises Interrupted
    in the main thread, so every `finally` on the way cleans up; later ones are ignored. In a
    deferred() block (cleanup) the first one is only recorded, and raised at the block's end."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forgets any signal received (for tests)."""
        self.received: int | None = None
        self._raised = False
        self._deferring = 0

    def install(self) -> None:
        """Handles SIGINT and SIGTERM, except one ignored on entry (as a shell's trap does:
        a background job of a non-interactive shell keeps ignoring SIGINT)."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(signum) != signal.SIG_IGN:
                signal.signal(signum, self._handler)

    def _handler(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is not None:
            return
        self.received = signum
        say(f"interrupted ({signal.Signals(signum).name})")
        if not self._deferring:
            self._raised = True
            raise Interrupted(signum)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
        if not self._deferring and self.received is not None and not self._raised:
            self._raised = True
            raise Interrupted(self.received)


SIGNALS = Signals()


def have(command: str) -> bool:
    return shutil.which(command) is not None


def is_root() -> bool:
    return os.geteuid() == 0


class Apt:
    """apt-get install and update, when we are root; `apt-get update` at most once a run."""

    def __init__(self) -> None:
        self.updated = False

    def update(self) -> bool:
        if self.updated:
            return True
        if not (is_root() and have("apt-get")):
            return False
        self.updated = True
        say("apt-get update")
        return subprocess.run(["apt-get", "update", "-q"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, check=False).returncode == 0

    def install(self, *packages: str) -> bool:
        if not (is_root() and have("apt-get")):
            return False
        say(f"installing {' '.join(packages)} (apt-get install)")
        command = ["apt-get", "install", "-y", "-q", "-o", "Dpkg::Use-Pty=0",
                   "--no-install-recommends", *packages]
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        with tempfile.TemporaryFile() as log:
            def attempt() -> bool:
                log.seek(0)
                log.truncate()
                return subprocess.run(command, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                      stderr=subprocess.STDOUT, check=False).returncode == 0
            # Perhaps a stale package list: update it once and try again.
            ok = attempt() or (self.update() and attempt())
            if not ok:
                log.seek(0)
                sys.stderr.buffer.write(log.read())
                sys.stderr.flush()
        return ok


APT = Apt()


def need(command: str, package: str) -> None:
    """Makes sure COMMAND exists, installing PACKAGE if we may."""
    if have(command) or (APT.install(package) and have(command)):
        return
    raise SetupError(f"{command} not found: apt-get install {package}")


def package_installed(package: str) -> bool:
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", package], capture_output=True,
                         text=True, check=False).stdout
    return out == "install ok installed"


def need_package(package: str) -> None:
    """For packages that are not found through a command name."""
    if package_installed(package) or APT.install(package):
        return
    raise SetupError(f"package {package} is not installed: apt-get install {package}")


def want_rxe_provider() -> None:
    """The rxe provider of libibverbs: without it no program sees rxe0. Warns only, since
    the command may not use libibverbs at all."""
    if (glob.glob("/usr/lib/*/libibverbs/librxe-rdmav*.so")
            or glob.glob("/usr/lib*/libibverbs/librxe-rdmav*.so")
            or APT.install("ibverbs-providers")):
        return
    say(f"warning: libibverbs has no rxe provider, programs will not see {DEVICE}: "
        "apt-get install ibverbs-providers")


def output(command: list[str]) -> str:
    """COMMAND's stdout (whatever its exit status; "" when it cannot run); stderr dropped."""
    try:
        return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL, text=True, check=False).stdout
    except OSError:
        return ""


def stop_process(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM to PROCESS, then SIGKILL to its process group (timeout(1) makes one of its
    own) when it is still there after GRACE seconds; reaps it."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait()


def exit_status(returncode: int) -> int:
    """A Popen returncode as the shell gives it: 128 + N for a death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclasses.dataclass
class Options:
    """The command line (cli.parse_args makes it)."""

    command: list[str]
    timeout: int = 1800
    nodes: int = 1
    rails: int = 1
    route: str = "auto"
    keep_going: bool = False
    verbose: bool = False


def make_temp_dir(parent: Path, prefix: str) -> Path:
    """A new folder PARENT/PREFIXxxxxxx (mode 0700), named as mktemp(1) names them: six
    letters and digits."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    while True:
        path = parent / (prefix + "".join(secrets.choice(alphabet) for _ in range(6)))
        try:
            path.mkdir(mode=0o700)
            return path
        except FileExistsError:
            continue

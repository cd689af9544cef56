"""The virtual Ethernet segment between the nodes: a vde_switch (Debian's vde2) on a Unix
socket in the run folder. Nothing touches the host's network interfaces.

The switch runs as our child (reaped, unlike a daemon), its console's stdin a FIFO that only
we hold open: it quits at EOF, so even a softroce killed with SIGKILL leaves no switch behind.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

from .common import SIGNALS, SetupError, stop_process


class Switch:
    """One vde_switch, its socket folder RUN/NAME (plugged in with QEMU's -netdev vde,sock=)."""

    def __init__(self, run: Path, name: str = "vde") -> None:
        self.socket = run / name
        self.fifo = run / f"{name}.in"
        self.process: subprocess.Popen | None = None
        self._hold: int | None = None  # our write end of the FIFO

    def start(self) -> None:
        try:
            os.mkfifo(self.fifo, 0o600)
        except OSError as e:
            raise SetupError(f"mkfifo {self.fifo} failed") from e
        # The read end first (without waiting for a writer), then ours; both close-on-exec,
        # so no other child holds the FIFO open.
        read_end = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self._hold = os.open(self.fifo, os.O_WRONLY | os.O_CLOEXEC)
            os.set_blocking(read_end, True)
            self.process = subprocess.Popen(
                ["vde_switch", "-s", str(self.socket), "-m", "0700"], stdin=read_end,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        finally:
            os.close(read_end)
        for _ in range(50):
            if (self.socket / "ctl").is_socket():
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise SetupError(f"vde_switch did not create {self.socket}/ctl")

    def stop(self) -> None:
        with SIGNALS.deferred():
            if self.process is not None:
                stop_process(self.process, 5)
            if self._hold is not None:
                with contextlib.suppress(OSError):
                    os.close(self._hold)
                self._hold = None

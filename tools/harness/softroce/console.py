"""The VMs' serial consoles, read by one thread each: a full log in the run folder, and on
stdout only what the caller wants to see.

The guest init brackets the command's output with marker lines carrying the run's nonce:
"@@softroce:NONCE:begin@@" and "@@softroce:NONCE:end:STATUS@@"; a node other than 1 prints
"@@softroce:NONCE:ready@@" once it is up.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

# Lines of several consoles (and threads) never interleave within a line.
_OUTPUT_LOCK = threading.Lock()

# The host powering a node off at the end of the run; not worth showing.
_QEMU_TERMINATING = b"qemu-system-x86_64: terminating on signal 15 from pid "


class Console:
    """One VM's console. Node 1 (or the only VM): everything up to the begin marker is hidden
    (unless verbose), the command's lines stream as they are (without the \\r the console
    adds), the rest is hidden (unless verbose); on_begin is called at the begin marker.
    Node K > 1: hidden until its ready marker (unless verbose), then every line prefixed
    "[nodeK] "."""

    def __init__(self, nonce: str, node: int, log: Path, out: BinaryIO, verbose: bool,
                 on_begin: Callable[[], None] | None = None) -> None:
        self.node = node
        self.log = log
        self.out = out
        self.verbose = verbose
        self.on_begin = on_begin
        self.begin = f"@@softroce:{nonce}:begin@@".encode()
        self.end = f"@@softroce:{nonce}:end:".encode()
        self.ready = f"@@softroce:{nonce}:ready@@".encode()
        self.state = "boot"
        self._out_broken = False

    def _show(self, line: bytes) -> None:
        if self._out_broken:
            return
        try:
            with _OUTPUT_LOCK:
                self.out.write(line + b"\n")
                self.out.flush()
        except (BrokenPipeError, ValueError, OSError):
            self._out_broken = True  # nobody reads our stdout any more; the log still does

    def feed(self, line: bytes) -> None:
        """One line of the console, its newline already removed."""
        if self.node == 1:
            self._feed_first(line)
        else:
            self._feed_other(line)

    def _feed_first(self, line: bytes) -> None:
        if self.state == "boot":
            if self.begin in line:
                self.state = "run"
                if self.on_begin:
                    self.on_begin()
            elif self.verbose:
                self._show(line)
        elif self.state == "run":
            if self.end in line:
                self.state = "after"
                line = line[:line.index(self.end)]  # output that lacked a final newline
                if line:
                    self._show(line)
            else:
                self._show(line)
        elif self.verbose:
            self._show(line)

    def _feed_other(self, line: bytes) -> None:
        if self.state == "boot" and self.ready in line:
            self.state = "up"
        elif line.startswith(_QEMU_TERMINATING):
            pass
        elif self.state == "up" or self.verbose:
            self._show(f"[node{self.node}] ".encode() + line)

    def run(self, stream: BinaryIO) -> None:
        """Reads STREAM to its end (a thread's body)."""
        with open(self.log, "wb") as log:
            for raw in stream:
                line = raw.removesuffix(b"\n").removesuffix(b"\r")
                log.write(line + b"\n")
                log.flush()
                self.feed(line)

    def tail(self, count: int = 30) -> list[str]:
        """The log's last COUNT lines."""
        try:
            text = self.log.read_bytes().decode(errors="replace")
        except OSError:
            return []
        return text.removesuffix("\n").split("\n")[-count:] if text else []

"""Running the check's commands: each one bounded, its process group stopped on the way out."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def run(cmd: list[str], top: Path, limit: float = 1800, **kw) -> subprocess.CompletedProcess:
    """Runs cmd in the tree's top, its output going to ours unless kw says otherwise. Nothing
    waits for ever: after `limit` seconds cmd's whole process group is killed and its status is
    124, as timeout(1) has it. Ctrl-C is passed on to the group (softroce then stops its VMs)."""
    process = subprocess.Popen(cmd, cwd=top, start_new_session=True, **kw)
    try:
        out, _ = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        print(f"{cmd[0]}: no end after {limit:.0f} s: stopped it", flush=True)
        return subprocess.CompletedProcess(cmd, 124, out)
    except KeyboardInterrupt:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        raise
    return subprocess.CompletedProcess(cmd, process.returncode, out)

"""Child processes started in their own process group (a launcher and everything it spawns)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the child's whole process group, then SIGKILL what is still there after 5 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(5)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_or_kill(proc: subprocess.Popen, timeout_s: float | None) -> bool:
    """Wait for the child; on timeout (or any interruption) kill its process group. True if it timed out."""
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return True
    except BaseException:
        kill_group(proc)
        raise
    return False


def log_tail(path: Path, n: int = 40) -> str:
    """The last ``n`` lines of a child's log ("" when there is none): what a failure message quotes."""
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""

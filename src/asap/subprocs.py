"""Child processes started in their own process group (a launcher and everything it spawns).

Every way a wait ends leaves no process of the group behind: a timeout, an interruption (Ctrl-C, or SIGTERM to
asap, turned into KeyboardInterrupt while a child runs) and a normal exit that left workers running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from contextlib import contextmanager, suppress
from pathlib import Path


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group; False when no process of it is left."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the child's whole process group, SIGKILL what is still there after 5 s (or once the leader is
    gone: its workers may ignore SIGTERM), and reap the leader."""
    if _signal_group(proc.pid, signal.SIGTERM):
        with suppress(subprocess.TimeoutExpired):  # a leader that ignores SIGTERM gets the SIGKILL below
            proc.wait(5)
    _signal_group(proc.pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):  # a process in uninterruptible sleep: nothing more can be done
        proc.wait(5)


@contextmanager
def _sigterm_interrupts():
    """While a child runs, SIGTERM to asap raises KeyboardInterrupt (as Ctrl-C does), so the group is killed
    rather than orphaned; the previous handler comes back afterwards. Only the main thread can set handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def wait_or_kill(proc: subprocess.Popen, timeout_s: float | None) -> bool:
    """Wait for the child; on timeout (or any interruption) kill its process group. True if it timed out.
    After a normal exit, processes the leader left in its group are killed too."""
    try:
        with _sigterm_interrupts():
            proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return True
    except BaseException:
        kill_group(proc)
        raise
    _signal_group(proc.pid, signal.SIGKILL)  # orphans of a leader that exited: nothing when it cleaned up
    return False


def log_tail(path: Path, n: int = 40) -> str:
    """The last ``n`` lines of a child's log ("" when there is none): what a failure message quotes."""
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""

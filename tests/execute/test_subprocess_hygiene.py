"""No process outlives the run that started it: after a timeout, after a leader that exits leaving workers,
after SIGINT or SIGTERM to the parent (asap), the child's process group is empty. Checked on the process table
(/proc), not on the parent's word."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import REPO

from asap.subprocs import wait_or_kill


def processes_with(marker: str) -> list[int]:
    """Pids of live (not zombie) processes whose environment holds ``marker``."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if (d / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            if marker.encode() in (d / "environ").read_bytes():
                found.append(int(d.name))
        except (OSError, IndexError):
            continue
    return found


def gone(marker: str, within_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while (left := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


# First thing in the child: SIGINT as a terminal gives it. A job started in the background by a non-interactive
# shell (CI scripts, ``cmd &``) inherits SIGINT ignored, and Python then keeps ignoring it. (Set in the child's
# own code, not by preexec_fn, which would fork the JAX-threaded test process.)
DEFAULT_SIGINT = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"


def marked_env() -> tuple[str, dict[str, str]]:
    marker = f"ASAP_HYGIENE_{uuid.uuid4().hex}"
    return marker, {**os.environ, marker: "1"}


def start_group(cmd: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(["sh", "-c", cmd], env=env, start_new_session=True, stdin=subprocess.DEVNULL)


def test_timeout_kills_the_whole_group():
    marker, env = marked_env()
    proc = start_group("sleep 300 & sleep 300 & trap '' TERM; wait", env)
    time.sleep(0.3)
    assert len(processes_with(marker)) == 3
    t0 = time.monotonic()
    assert wait_or_kill(proc, 1.0) is True
    assert time.monotonic() - t0 < 15
    assert gone(marker) == []


def test_leader_exit_leaves_no_workers():
    marker, env = marked_env()
    proc = start_group("sleep 300 & sleep 0.2; exit 0", env)
    assert wait_or_kill(proc, 30) is False
    assert proc.returncode == 0
    assert gone(marker) == []


PARENT = r'''
import subprocess, sys
from asap.subprocs import wait_or_kill
proc = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300 & wait"], start_new_session=True)
print("started", flush=True)
wait_or_kill(proc, None)
'''


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_to_the_parent_kills_the_children(sig):
    marker, env = marked_env()
    parent = subprocess.Popen([sys.executable, "-c", DEFAULT_SIGINT + PARENT], env=env, stdout=subprocess.PIPE,
                              text=True)
    assert parent.stdout.readline().strip() == "started"
    time.sleep(0.3)
    assert len(processes_with(marker)) >= 3
    parent.send_signal(sig)
    parent.wait(30)
    assert gone(marker) == []


@pytest.mark.slow
@pytest.mark.torch
def test_sigint_to_asap_run_kills_the_workers():
    """Ctrl-C to ``asap run`` while the torchrun workers train: asap exits, and no worker is left."""
    pytest.importorskip("torch")
    marker, env = marked_env()
    asap = DEFAULT_SIGINT + "from asap.cli import main; main()"
    run = subprocess.Popen([sys.executable, "-c", asap, "run", "-m", "tiny-dense",
                            "-S", "dp=2", "-b", "4", "-s", "64", "--steps", "100000"], env=env, cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        line = ""
        while "[asap.train] step" not in line and time.monotonic() < deadline:
            line = run.stderr.readline()
            assert line or run.poll() is None, "asap run ended before a step"
        assert len(processes_with(marker)) >= 3  # asap, torchrun, the workers (they inherit its environment)
        run.send_signal(signal.SIGINT)
        run.wait(60)
    finally:
        if run.poll() is None:
            run.kill()
    assert gone(marker, 20) == []

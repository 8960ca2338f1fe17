import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def run_cli(*args, timeout=300, cwd=None):
    """Run the real ``asap`` CLI in a child process; returns CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-c", "from asap.cli import main; main()", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


@pytest.fixture
def cli():
    return run_cli


def assert_one_line_error(proc, *needles):
    """Bad input: non-zero exit, exactly one line on stderr naming the problem, no traceback."""
    assert proc.returncode != 0, proc.stdout
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]

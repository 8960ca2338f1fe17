"""The README's first command, run twice in a fresh folder, prints the same loop table: tune's Memory is the
run's own (``REPORT-memory.sqlite``, made fresh), not the user's shared one; every file it writes is announced
on stderr, nothing else appears in the folder, and the corrected cluster's memory is the catalog's figure."""

import re
import shlex

import yaml

from conftest import REPO, run_cli


def _readme_tune() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = text.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    first = block.strip().splitlines()[0]
    tune = first[first.index(".venv/bin/asap tune"):]
    return shlex.split(tune)[2:]  # after ".venv/bin/asap tune"


def test_the_readme_first_command_twice_prints_the_same_table(tmp_path):
    (tmp_path / "docs").symlink_to(REPO / "docs")
    args = _readme_tune()
    runs = [run_cli("tune", *args, cwd=tmp_path, timeout=900) for _ in range(2)]
    for p in runs:
        assert p.returncode == 0, p.stderr[-2000:]
        assert "already in memory" not in p.stdout
    assert runs[0].stdout == runs[1].stdout
    table = [ln for ln in runs[0].stdout.splitlines() if re.match(r"│ \d ", ln)]
    assert len(table) == int(args[args.index("--budget") + 1])
    announced = set(re.findall(r"asap tune writes \w+: (\S+)", runs[1].stderr))
    assert announced == {"tune.html", "tune-cluster.yaml", "tune-memory.sqlite"}, runs[1].stderr
    written = {p.name for p in tmp_path.iterdir() if p.name != "docs"}
    assert written == announced
    cluster = yaml.safe_load((tmp_path / "tune-cluster.yaml").read_text())
    assert cluster["hbm_gb"] == 79.6475  # the catalog's H100: nvidia-smi's 81559 MiB, not the marketed 80


def test_the_readme_second_command_is_the_script_ci_runs():
    """The README's test command is scripts/setup.sh then pytest, and .ci/run runs the same two; every step
    of the script is a single commented line (the comment says what it installs or runs, and why)."""
    text = (REPO / "README.md").read_text()
    block = text.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = block.strip().splitlines()
    assert len(commands) == 2 and commands[1] == "bash scripts/setup.sh && .venv/bin/python -m pytest -n 2 --dist loadfile"
    ci = [ln for ln in (REPO / ".ci/run").read_text().splitlines() if ln and not ln.startswith(("#", "set ", "cd "))]
    assert ci == ["bash scripts/setup.sh", ".venv/bin/python -m pytest -n 2 --dist loadfile"]
    lines = (REPO / "scripts/setup.sh").read_text().splitlines()
    steps = [i for i, ln in enumerate(lines) if ln and not ln.startswith(("#", "set ", "cd "))]
    assert steps and all(lines[i - 1].startswith("#") for i in steps)

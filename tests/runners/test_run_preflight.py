"""``asap run`` refuses what would fail in its workers before it starts them (one line, exit 2, no launch
banner), and shows each step's loss and time without --verbose."""

from __future__ import annotations

import pytest

from conftest import assert_one_line_error, run_cli

RUN = ["run", "-m", "tiny-dense", "-S", "dp=2", "-b", "8", "-s", "32", "--steps", "2"]


@pytest.mark.parametrize("extra, field, needle", [
    (["--data", "no-such-file.txt"], "data", "is not a file"),
    (["--profile", "/proc/asap-cannot-write-here"], "profile", "cannot write"),
])
def test_bad_files_are_refused_before_launch(extra, field, needle):
    proc = run_cli(*RUN, *extra)
    assert_one_line_error(proc, field, needle)
    assert proc.returncode == 2 and "[asap run]" not in proc.stderr


def test_a_too_short_data_file(tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("hello")
    assert_one_line_error(run_cli(*RUN, "--data", short), "data", "fewer than seq_len + 2 = 34")


def test_a_model_too_large_for_this_host_is_refused_from_the_cost_model():
    proc = run_cli("run", "-m", "llama3-70b", "-S", "dp=2", "-b", "8", "-s", "1024")
    assert_one_line_error(proc, "model", "GiB over 2 processes", "available")


def test_a_dispatcher_the_trainer_does_not_have():
    proc = run_cli("run", "-m", "tiny-moe", "-S", "ep=2,dispatcher=allgather", "-b", "8", "-s", "32")
    assert_one_line_error(proc, "strategy.dispatcher", "alltoall or dedup")


def test_progress_without_verbose():
    proc = run_cli(*RUN, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "[asap.train] step 1/2 loss" in proc.stderr and "[asap.train] step 2/2 loss" in proc.stderr
    assert "step time" in proc.stdout

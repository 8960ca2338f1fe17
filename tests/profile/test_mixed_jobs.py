"""Traces of different jobs are refused, not merged (real traces from ../shared/traces/hta)."""

from __future__ import annotations

import pytest

from conftest import SHARED, assert_one_line_error

HTA = SHARED / "traces" / "hta"
pytestmark = pytest.mark.skipif(not HTA.exists(), reason="needs ../shared/traces")


def test_different_world_sizes_are_refused(cli):
    """A 2-rank job's trace and an 8-rank job's: world sizes 2 and 8."""
    p = cli("diagnose", str(HTA / "nccl_parser_config_nccl_data.json.gz"),
            str(HTA / "trace_diff_control_control.json.gz"), "--json")
    assert_one_line_error(p, "traces", "different jobs", "world sizes 2, 8")


def test_different_devices_are_refused(cli):
    """Two 2-rank jobs, one on A100s and one on V100s."""
    p = cli("diagnose", str(HTA / "nccl_parser_config_nccl_data.json.gz"),
            str(HTA / "trace_diff_test_test.json.gz"), "--json")
    assert_one_line_error(p, "traces", "different jobs", "devices")


def test_the_ranks_of_one_job_are_diagnosed_together(cli):
    import json

    p = cli("diagnose", str(HTA / "trace_filter_sampled_rank-0.json.gz"),
            str(HTA / "trace_filter_sampled_rank-1.json.gz"), "--json")
    assert p.returncode == 0, p.stderr
    assert len(json.loads(p.stdout)["ranks"]) == 2

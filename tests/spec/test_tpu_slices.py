"""TPU slices as Google names them, and --slices for multislice jobs (issue 45, point 6).

Google's names count TensorCores for v4 and v5p (two per chip: v5p-256 is 128 chips) and chips for v5e (v5litepod)
and v6e. asap's earlier ``tpu-v5p-256`` meant 256 chips: refused with the names that say either count; the names
whose count agrees under both readings (``tpu-v5e-256``, ``tpu-v6e-256``, ``tpu-v5p-256chip``) stay aliases."""

import json
import math

import pytest
import yaml

from conftest import assert_one_line_error, run_cli

from asap.errors import AsapError
from asap.spec.hardware import load_cluster


@pytest.mark.parametrize("name,chips", [("v5p-256", 128), ("v5p-512", 256), ("tpu-v5p-512", 256), ("v4-128", 64),
                                        ("v5p-8", 4), ("v5e-256", 256), ("v5litepod-64", 64), ("v6e-256", 256),
                                        ("tpu-v5p-256chip", 256), ("tpu-v6e-256", 256), ("tpu-v5e-256", 256)])
def test_google_slice_names(name, chips):
    c = load_cluster(name)
    assert c.num_devices == chips and c.topology.num_domains == 1
    assert c.accelerator.name == "tpu-" + name.removeprefix("tpu-").split("-")[0].replace("v5litepod", "v5e")


def test_the_old_v5p_name_is_refused_with_the_right_ones():
    p = run_cli("estimate", "-m", "llama3-8b", "-c", "tpu-v5p-256", "-b", "256", "-s", "8192")
    assert_one_line_error(p, "cluster", "tpu-v5p-256", "v5p-512", "128 chips")


@pytest.mark.parametrize("name,why", [("v5e-512", "--slices"), ("v5p-7", "not a slice"), ("v5p-12", "whole hosts")])
def test_impossible_slices(name, why):
    with pytest.raises(AsapError, match=why):
        load_cluster(name)


def estimate(*args):
    p = run_cli("estimate", "-m", "llama3-70b", "-b", "512", "-s", "8192", "-S", "zero3 rc:full", "--json", *args)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_slices_is_the_multislice_cluster_file(tmp_path):
    """``-c v5p-512 --slices 2`` prices what the YAML with ``scale_up_domain`` did: two 256-chip ICI slices
    joined by DCN (not one 512-chip slice)."""
    f = tmp_path / "two-slices.yaml"
    f.write_text(yaml.safe_dump({"accelerator": "tpu-v5p", "devices_per_node": 4, "nodes": 128,
                                 "scale_up_domain": 256}))
    two = estimate("-c", "v5p-512", "--slices", "2")
    assert two["step_time_s"] == estimate("-c", str(f))["step_time_s"]
    assert load_cluster("v5p-512", nodes=128).topology.num_domains == 1  # --nodes: one 512-chip slice
    assert load_cluster("v5p-512", slices=2).topology.num_domains == 2
    c = load_cluster("v5p-512", slices=4)
    assert (c.num_devices, c.scale_up_domain, c.topology.num_domains) == (1024, 256, 4)
    assert_one_line_error(run_cli("estimate", "-m", "llama3-8b", "-c", "v5p-512", "--slices", "0", "-b", "256", "-s",
                                  "8192"), "slices")


@pytest.mark.parametrize("command", ["estimate", "plan", "compare", "propose", "emit", "tune"])
def test_every_job_command_takes_slices(command):
    p = run_cli(command, "--help")
    assert p.returncode == 0 and "--slices" in p.stdout


def test_emit_maxtext_puts_the_batch_across_slices():
    """MaxText over two slices: the data axis crosses DCN (dcn_* axes multiply to the slice count)."""
    p = run_cli("emit", "-f", "maxtext", "-m", "llama3-8b", "-c", "v5p-512", "--slices", "2", "-b", "512", "-s",
                "8192", "-S", "zero3 rc:full", "--json")
    assert p.returncode == 0, p.stderr
    cfg = yaml.safe_load(json.loads(p.stdout)["text"])
    dcn = [v for k, v in cfg.items() if k.startswith("dcn_")]
    assert math.prod(dcn) == 2 and "--num-slices 2" in json.loads(p.stdout)["launch"]["where"]

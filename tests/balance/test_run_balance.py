"""``asap run --lengths FILE [--balance]``: packed samples with document-masked attention in the reference
trainer, placed over data-parallel ranks by ``asap balance``: the same samples (so the same losses), the
attention work each rank measures is what the placement says, and balancing evens it."""

from __future__ import annotations

import json

import pytest

from asap.runners.torch.data import attention_work, document_ids
from asap.runners.torch.model import document_mask
from conftest import assert_one_line_error, run_cli

S = 32
# each step: four single full-length documents, then four samples of eight 4-token documents; file order puts
# the four long ones on dp rank 0: sum(l^2) 4 x 1024 against 4 x 8 x 16 = 512 on rank 1
STEP = [[S]] * 4 + [[4] * 8] * 4


def run(path, *extra):
    proc = run_cli("run", "-m", "tiny-dense", "-S", "dp=2", "-b", "8", "-s", S, "--steps", "2", "--lengths", path,
                   "--json", *extra, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    path = tmp_path_factory.mktemp("lengths") / "samples.json"
    path.write_text(json.dumps(STEP * 2))
    return run(path), run(path, "--balance")


def test_the_document_mask_is_causal_within_documents():
    ids = document_ids([[2, 3]], 6)  # two documents, then one padding position
    assert ids.tolist() == [[0, 0, 1, 1, 1, 2]]
    m = document_mask(ids)[0, 0]
    assert m[1, 0] and not m[2, 1] and m[4, 2] and not m[2, 4] and not m[5, 4]
    assert attention_work(ids) == pytest.approx((4 + 9 + 1) / 36)


def test_balancing_keeps_the_samples_and_so_the_losses(runs):
    plain, balanced = runs
    assert balanced["losses"] == pytest.approx(plain["losses"], rel=1e-5)


def test_measured_attention_work_is_the_placements(runs):
    plain, balanced = runs
    long, short = S * S / (S * S), 8 * 16 / (S * S)  # q of one sample of each kind
    assert plain["attention_work_per_dp_rank"] == pytest.approx([long, short])  # rows 0-3 then 4-7
    assert plain["attention_max_over_mean"] == pytest.approx(long / ((long + short) / 2))
    # balanced: two long and two short samples on each rank
    assert balanced["attention_work_per_dp_rank"] == pytest.approx([(long + short) / 2] * 2)
    assert balanced["attention_max_over_mean"] == pytest.approx(1.0)


def test_masked_attention_changes_the_loss_from_plain_causal(runs, tmp_path):
    plain, _ = runs
    proc = run_cli("run", "-m", "tiny-dense", "-S", "dp=2", "-b", "8", "-s", S, "--steps", "1", "--json")
    causal = json.loads(proc.stdout)
    assert causal["losses"][0] != pytest.approx(plain["losses"][0], rel=1e-6)


@pytest.mark.parametrize("extra, needle", [
    (["-S", "pp=2,dp=1"], "pp=1 only"),
    (["--balance"], "needs --lengths"),
])
def test_refusals(tmp_path, extra, needle):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(STEP))
    args = ["run", "-m", "tiny-dense", "-b", "8", "-s", S, *extra]
    if "--balance" not in extra:
        args += ["--lengths", path]
    assert_one_line_error(run_cli(*args), needle.split()[0] if "needs" in needle else "lengths", needle)

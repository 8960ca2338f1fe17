"""What is priced is what runs: the trainer cuts its pipeline chunks by ``asap.spec.layout``, the layout the
cost model prices (issue 9, item 1). The chunks ``pipeline_split`` builds, and those the workers of a real run
report, hold exactly ``layout(...).chunk_ranges()``; ``asap run --layer-split`` reaches the workers, and a
bad split is refused before anything is launched."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from asap.spec.layout import Unit, layout  # noqa: E402
from asap.spec.loader import load_model  # noqa: E402
from asap.spec.model import model_from_dict  # noqa: E402
from asap.spec.train import TrainSpec  # noqa: E402
from asap.runners.torch.launch import RunConfig, launch, resolve_run_strategy  # noqa: E402
from asap.runners.torch.model import build_model  # noqa: E402
from asap.runners.torch.parallel import pipeline_split  # noqa: E402

from conftest import assert_one_line_error, run_cli  # noqa: E402

def _dense(layers: int):
    return model_from_dict(dict(name=f"dense{layers}", num_layers=layers, hidden_size=8, ffn_hidden_size=16,
                                num_attention_heads=2, vocab_size=32))


def _moe_mtp():
    return model_from_dict(dict(name="moe5-mtp", num_layers=5, hidden_size=8, ffn_hidden_size=16,
                                num_attention_heads=2, vocab_size=32, mtp_layers=1,
                                moe=dict(num_experts=2, top_k=1, expert_ffn_hidden_size=8, first_dense_layers=1)))


def _built(spec, pp: int, vpp: int, split: tuple[int, ...] = ()):
    """chunk id -> (layer indices, has embedding, has head, dense layers, MoE layers), over every pp rank."""
    model = build_model(spec, 8, seed=0)
    out = {}
    for rank in range(pp):
        for sid, part in pipeline_split(model, spec, rank, pp, vpp, split):
            assert sid % pp == rank and sid not in out
            blocks = list(part.layers.values())
            out[sid] = ([int(k) for k in part.layers.keys()], part.tok_embeddings is not None,
                        part.output is not None and part.norm is not None,
                        sum(b.moe is None for b in blocks), sum(b.moe is not None for b in blocks))
    return [out[j] for j in range(pp * vpp)]


@pytest.mark.parametrize("spec,pp,vpp,split,expect", [
    (_dense(4), 3, 1, (), (1, 2, 1)),
    (_dense(80), 8, 8, (), None),
    (_moe_mtp(), 2, 1, (), None),
    (_moe_mtp(), 2, 2, (), None),
    (_dense(4), 3, 1, (2, 1, 1), (2, 1, 1)),
    (_dense(4), 3, 1, (0, 2, 2), (0, 2, 2)),
    (_dense(4), 2, 3, (), (0, 1, 1, 1, 1, 0)),
], ids=["4L-pp3", "80L-pp8-vpp8", "moe-mtp-pp2", "moe-mtp-pp2-vpp2", "split-2/1/1", "split-0/2/2", "4L-6chunks"])
def test_pipeline_split_builds_the_layout(spec, pp, vpp, split, expect):
    lay = layout(spec, pp, vpp, split)
    built = _built(spec, pp, vpp, split)
    assert [ids for ids, *_ in built] == [list(r) for r in lay.chunk_ranges()]
    if expect is not None:
        assert lay.chunk_layers == expect
    for j, (_, emb, head, dense, moe) in enumerate(built):
        units = lay.chunk_units[j]
        assert (emb, head) == (bool(units[Unit.EMBEDDING]), bool(units[Unit.HEAD]))
        assert (dense, moe) == (units[Unit.DENSE], units[Unit.MOE])
    if spec.mtp_layers:  # MTP modules only add units on the last chunk; the trainer builds none
        no_mtp = model_from_dict(dict(spec.to_dict(), mtp_layers=0))
        assert layout(no_mtp, pp, vpp, split).chunk_ranges() == lay.chunk_ranges()


def test_a_real_run_builds_the_layout(tmp_path):
    """tiny-dense (4 layers) on pp=3 (3 gloo processes): the default [1,2,1] and an embedding-only first
    chunk [0,2,2], in one launch; same weights and data, so the same losses."""
    spec = load_model("tiny-dense")
    train = TrainSpec(4, 16, "fp32")
    strategies = ["pp=3", "pp=3,layer_split=0/2/2"]
    configs = [RunConfig(spec, resolve_run_strategy(s, spec, train), 4, 16, steps=2) for s in strategies]
    results = launch(configs, device="cpu", timeout_s=300, workdir=str(tmp_path))
    for c, r in zip(configs, results, strict=True):
        assert r.layers_per_chunk == list(layout(spec, 3, 1, c.strategy.layer_split).chunk_layers)
        assert len(r.losses) == 2 and all(math.isfinite(x) for x in r.losses)
    assert [r.layers_per_chunk for r in results] == [[1, 2, 1], [0, 2, 2]]
    assert results[1].strategy["layer_split"] == "0/2/2" and results[0].strategy["layer_split"] is None
    assert results[0].losses == pytest.approx(results[1].losses, rel=1e-4)


def test_cli_layer_split_reaches_the_workers():
    p = run_cli("run", "--model", "tiny-dense", "--strategy", "pp=2", "--layer-split", "3,1", "--global-batch", "4",
                "--seq-len", "16", "--steps", "2", "--device", "cpu", "--json", timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    assert out["strategy"]["layer_split"] == "3/1" and out["layers_per_chunk"] == [3, 1]
    assert all(math.isfinite(x) for x in out["losses"])


@pytest.mark.parametrize("args,needle", [
    (["--strategy", "pp=3", "--layer-split", "1,1,1"], "places 3 layers but the model has 4"),
    (["--strategy", "pp=3", "--layer-split", "2/2"], "gives 2 chunks but pp*vpp = 3"),
    (["--strategy", "pp=3", "--layer-split", "2/0/2"], "chunk 1 holds no layer"),
    (["--strategy", "pp=2,layer_split=2/2", "--layer-split", "3/1"], "given both"),
])
def test_cli_bad_layer_split_is_refused_before_launching(args, needle):
    p = run_cli("run", "--model", "tiny-dense", *args, "--global-batch", "4", "--seq-len", "16", "--steps", "2",
                "--device", "cpu", "--json", timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    # one line and no "[asap run] ... on N process(es)": nothing was launched
    assert_one_line_error(p, "strategy.layer_split", needle)

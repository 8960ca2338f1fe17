"""Single-process checks of the reference trainer's pieces: the model matches its spec, the data is
deterministic, and strategies the trainer cannot run are refused before anything is launched."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from asap.errors import AsapError  # noqa: E402
from asap.spec.loader import load_model  # noqa: E402
from asap.spec.model import model_from_dict  # noqa: E402
from asap.spec.train import TrainSpec  # noqa: E402
from asap.runners.torch.data import SyntheticTokens, TextFileTokens, local_rows  # noqa: E402
from asap.runners.torch.launch import check_supported, resolve_run_strategy  # noqa: E402
from asap.runners.torch.model import build_model, cross_entropy  # noqa: E402
from asap.runners.torch.parallel import pipeline_split, stage_ids  # noqa: E402

TINY_MLA = dict(name="tiny-mla", num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4,
                vocab_size=256, mla=dict(q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
                                         v_head_dim=16),
                moe=dict(num_experts=4, top_k=2, expert_ffn_hidden_size=32, shared_experts=1, first_dense_layers=1))


@pytest.mark.parametrize("name", ["tiny-dense", "tiny-moe", "mla"])
def test_model_matches_spec_parameter_count(name):
    spec = model_from_dict(TINY_MLA) if name == "mla" else load_model(name)
    model = build_model(spec, 16, seed=0)
    assert sum(p.numel() for p in model.parameters()) == spec.num_params()
    tokens = SyntheticTokens(spec.vocab_size, 0).batch(0, 2, 16)
    logits = model(tokens[:, :-1])
    assert logits.shape == (2, 16, spec.vocab_size)
    loss = cross_entropy(logits, tokens[:, 1:])
    # a fresh model predicts close to uniformly
    assert abs(loss.item() - torch.log(torch.tensor(float(spec.vocab_size))).item()) < 0.3
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_init_is_independent_of_layout_and_deterministic():
    spec = load_model("tiny-moe")
    a, b = build_model(spec, 16, seed=3), build_model(spec, 16, seed=3)
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert na == nb and torch.equal(pa, pb)
    c = build_model(spec, 16, seed=4)
    assert not torch.equal(a.output.weight, c.output.weight)


def test_synthetic_data_is_a_function_of_seed_and_step():
    d = SyntheticTokens(512, seed=0)
    assert torch.equal(d.batch(5, 8, 32), SyntheticTokens(512, seed=0).batch(5, 8, 32))
    assert not torch.equal(d.batch(5, 8, 32), d.batch(6, 8, 32))
    b = d.batch(0, 8, 32)
    assert b.shape == (8, 33) and b.dtype == torch.long and int(b.max()) < 512
    # rank 1 of 4 gets rows 2..3
    assert torch.equal(local_rows(b, 1, 4), b[2:4])


def test_text_file_data(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("the quick brown fox jumps over the lazy dog. " * 20)
    d = TextFileTokens(f, 512, seed=0)
    b = d.batch(0, 4, 16)
    assert b.shape == (4, 17) and int(b.max()) < 256
    with pytest.raises(AsapError, match="vocab_size >= 256"):
        TextFileTokens(f, 128, seed=0)


def test_pipeline_split_keeps_every_layer_once():
    assert stage_ids(1, 2, 2) == [1, 3]
    spec = load_model("tiny-dense")
    model = build_model(spec, 16, seed=0)
    seen = []
    for rank in range(2):
        for sid, part in pipeline_split(model, spec, rank, 2, 2):
            seen += [int(k) for k in part.layers.keys()]
            assert (part.tok_embeddings is not None) == (sid == 0)
            assert (part.output is not None) == (sid == 3)
    assert sorted(seen) == [0, 1, 2, 3]


def test_run_strategy_defaults():
    dense, moe = load_model("tiny-dense"), load_model("tiny-moe")
    t = TrainSpec(8, 32, "fp32")
    assert resolve_run_strategy("tp=2", dense, t).devices == 2
    s = resolve_run_strategy("ep=4", moe, t)
    assert (s.dp, s.ep, s.etp) == (4, 4, 1)
    s = resolve_run_strategy("tp=2,ep=4", moe, t)  # etp defaults to tp (Megatron-Core): ep*etp = 8 devices
    assert (s.dp, s.tp, s.ep, s.etp, s.edp) == (4, 2, 4, 2, 1)
    s = resolve_run_strategy("tp=2,ep=4,etp=1", moe, t)
    assert (s.dp, s.tp, s.ep, s.etp, s.edp) == (2, 2, 4, 1, 1)


@pytest.mark.parametrize("model,strategy,device,match", [
    ("tiny-dense", "cp=2", "cpu", "CUDA only"),
    ("tiny-moe", "tp=2", "cpu", "seq_len=31 is not divisible by tp=2"),
    ("mla", "tp=2", "cpu", "MLA"),
    ("tiny-dense", "pp=4,dp=2", "cpu", "1f1b needs at least pp=4 micro-batches"),
    ("tiny-dense", "pp=2,dp=2,zero=3,schedule=zb", "cpu", "zero=3 with schedule=zb"),
])
def test_unsupported_strategies_are_refused_up_front(model, strategy, device, match):
    spec = model_from_dict(TINY_MLA) if model == "mla" else load_model(model)
    t = TrainSpec(8 if "pp=4" not in strategy else 4, 31 if strategy == "tp=2" else 32, "fp32")
    with pytest.raises(AsapError, match=match):
        check_supported(spec, resolve_run_strategy(strategy, spec, t), t, device)


def test_tied_embeddings_refuse_pipeline():
    spec = model_from_dict(dict(name="tied", num_layers=2, hidden_size=64, ffn_hidden_size=128,
                                num_attention_heads=4, vocab_size=256, tie_embeddings=True))
    t = TrainSpec(4, 16, "fp32")
    with pytest.raises(AsapError, match="ties its embeddings"):
        check_supported(spec, resolve_run_strategy("pp=2", spec, t), t, "cpu")
    check_supported(spec, resolve_run_strategy("dp=2,zero=3", spec, t), t, "cpu")

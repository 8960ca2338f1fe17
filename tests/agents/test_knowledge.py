"""The knowledge base (asap.agents.knowledge) and its retrieval (asap.agents.retrieval), on the real entries."""

from __future__ import annotations

import pytest

from asap.agents.knowledge import BOTTLENECKS, KnowledgeEntry, apply_move, load_knowledge
from asap.agents.retrieval import Retrieved, retrieve
from asap.errors import AsapError
from asap.spec.strategy import parse_strategy

MINIMUM = {"compute": 4, "memory": 4, "communication": 4, "pipeline_bubble": 4, "host": 2, "imbalance": 2}

# reasonable strategies (128 devices, MoE-capable); every move must apply to at least one of them
BASES = [
    dict(dp=4, tp=4, pp=4, vpp=1, cp=2, ep=8, etp=2, mbs=2, recompute="full", zero=1, sp=1, schedule="1f1b",
         dispatcher="alltoall", a2a_overlap=0),
    dict(dp=8, tp=2, pp=4, vpp=2, cp=1, ep=4, etp=1, mbs=1, recompute="none", zero=3, sp=0,
         schedule="interleaved", dispatcher="dedup", a2a_overlap=1),
    dict(dp=16, tp=8, pp=1, vpp=1, cp=1, ep=1, etp=1, mbs=4, recompute="selective", zero=2, sp=1,
         schedule="gpipe", dispatcher="allgather", a2a_overlap=0),
]

GOOD = """---
id: {id}
title: A test entry
bottlenecks: [compute]
families: [any]
model_kinds: [any]
frameworks: [any]
when: ["tp > 1"]
moves:
  - {{tp: "/2", dp: "x2"}}
sources: ["nowhere"]
---
Body text.
"""


@pytest.fixture(scope="module")
def entries() -> list[KnowledgeEntry]:
    return load_knowledge()


def test_all_entries_load_and_validate(entries):
    assert len(entries) >= 32
    assert [e.id for e in entries] == sorted(e.id for e in entries)
    assert len({e.id for e in entries}) == len(entries)
    for e in entries:
        assert 80 <= len(e.body.split()) <= 250, e.id
        assert e.moves and e.sources, e.id
        assert all(1 <= len(m) <= 3 for m in e.moves), e.id


def test_each_bottleneck_class_has_its_minimum(entries):
    for bottleneck, minimum in MINIMUM.items():
        assert sum(bottleneck in e.bottlenecks for e in entries) >= minimum, bottleneck
    assert set(MINIMUM) == set(BOTTLENECKS)


def test_required_topics_are_covered(entries):
    ids = {e.id for e in entries}
    for needed in ("tpu-compute-bound-more-data-parallel", "tpu-memory-bound-add-sharding",
                   "tpu-communication-bound-halve-model-parallel", "interleaved-pipeline-vpp",
                   "zero-bubble-schedule", "moe-hierarchical-alltoall-dedup", "moe-a2a-overlap",
                   "expert-tensor-parallel-folding", "context-parallel-long-sequences", "zero-stages",
                   "fsdp-full-sharding", "sequence-parallel-with-tp", "tp-within-nvlink-domain",
                   "tpu-mesh-ici-vs-dcn", "ascend-hccs-supernode", "attention-aware-data-balancing",
                   "cuda-graphs-launch-overhead", "stragglers-and-jitter", "fp8-matmuls", "moe-load-imbalance",
                   "pipeline-stage-balancing", "zero3-gather-cost-at-scale"):
        assert needed in ids


def test_every_move_applies_to_some_reasonable_strategy(entries):
    for base in BASES:
        parse_strategy(base)  # the bases themselves are well-formed strategies
    for e in entries:
        for move in e.moves:
            results = [apply_move(base, move) for base in BASES]
            applied = [r for r in results if r is not None]
            assert applied, f"{e.id}: {move} applies to no base strategy"
            for r in applied:
                parse_strategy(r)  # every value is still a valid strategy value


def test_apply_move_ops():
    s = dict(dp=4, tp=2, pp=1, mbs=3, recompute="none", zero=1)
    assert apply_move(s, {"tp": "/2", "dp": "x2"}) == {**s, "tp": 1, "dp": 8}
    assert s["tp"] == 2  # a new dict; the input is untouched
    assert apply_move(s, {"recompute": "=moe_act+layernorm"})["recompute"] == "layernorm+moe_act"
    assert apply_move(s, {"zero": "+1"})["zero"] == 2
    assert apply_move(s, {"vpp": "+1"})["vpp"] == 2  # a missing key starts from the default
    assert apply_move(s, {"pp": "/2"}) is None  # 1 / 2
    assert apply_move(s, {"mbs": "/2"}) is None  # odd
    assert apply_move(s, {"zero": "-1", "tp": "/2"})["zero"] == 0
    assert apply_move({**s, "zero": 0}, {"zero": "-1"}) is None  # out of range
    assert apply_move({**s, "zero": 3}, {"zero": "+1"}) is None
    assert apply_move(s, {"recompute": "=none"}) is None  # changes nothing
    with pytest.raises(AsapError, match="unknown strategy key"):
        apply_move(s, {"layers": "x2"})


def _write(tmp_path, name, text):
    (tmp_path / f"{name}.md").write_text(text)
    return tmp_path


@pytest.mark.parametrize("old,new,field", [
    ("bottlenecks: [compute]", "bottlenecks: [disk]", "bottlenecks"),
    ('{tp: "/2", dp: "x2"}', '{tp: "/2", layers: "x2"}', "moves"),
    ('{tp: "/2", dp: "x2"}', '{tp: "^2"}', "moves"),
    ('{tp: "/2", dp: "x2"}', '{recompute: "x2"}', "moves"),
    ('{tp: "/2", dp: "x2"}', '{schedule: "=fast"}', "moves"),
    ("families: [any]", "families: [quantum]", "families"),
    ("model_kinds: [any]", "model_kinds: [sparse]", "model_kinds"),
    ("frameworks: [any]", "frameworks: [jaxformer]", "frameworks"),
    ("title: A test entry\n", "", "title"),
])
def test_malformed_entry_is_refused_naming_file_and_field(tmp_path, old, new, field):
    text = GOOD.format(id="bad-entry").replace(old, new)
    assert text != GOOD.format(id="bad-entry")
    folder = _write(tmp_path, "bad-entry", text)
    with pytest.raises(AsapError) as err:
        load_knowledge(folder)
    assert err.value.field.startswith("bad-entry.md:")
    assert field in err.value.field


def test_id_must_match_file_stem_and_good_entry_loads(tmp_path):
    (tmp_path / "a").mkdir()
    good = load_knowledge(_write(tmp_path / "a", "good-entry", GOOD.format(id="good-entry")))
    assert [e.id for e in good] == ["good-entry"] and good[0].body == "Body text."
    folder = tmp_path / "b"
    folder.mkdir()
    with pytest.raises(AsapError, match="file stem") as err:
        load_knowledge(_write(folder, "other-name", GOOD.format(id="good-entry")))
    assert err.value.field == "other-name.md:id"
    (folder / "other-name.md").write_text("no front matter here")
    with pytest.raises(AsapError, match="front matter"):
        load_knowledge(folder)


def _moves(r: Retrieved) -> list[dict[str, str]]:
    return r.entry.moves


def test_compute_bound_tpu_dense_trades_cp_or_tp_for_dp():
    top = retrieve("compute", {"family": "tpu", "model_kind": "dense", "framework": "maxtext", "devices": 256})[0]
    assert "compute" in top.entry.bottlenecks
    assert any(m.get("dp") == "x2" and (m.get("cp") == "/2" or m.get("tp") == "/2") for m in _moves(top))


@pytest.mark.parametrize("family,framework", [("hopper", "megatron"), ("tpu", "maxtext"), ("ampere", "deepspeed")])
def test_memory_bound_adds_sharding_model_parallelism_or_recompute(family, framework):
    top = retrieve("memory", {"family": family, "model_kind": "dense", "framework": framework, "devices": 64})[0]
    assert "memory" in top.entry.bottlenecks

    def saves_memory(m):
        grows = any(m.get(k, "").startswith(("x", "+")) for k in ("tp", "pp", "cp", "zero"))
        return grows or m.get("zero") == "=3" or m.get("sp") == "=1" or m.get("recompute", "=none") != "=none"
    assert any(saves_memory(m) for m in _moves(top))


def test_communication_bound_tpu_halves_model_parallelism_or_keeps_it_on_ici():
    ranked = retrieve("communication", {"family": "tpu", "model_kind": "dense", "framework": "maxtext",
                                        "devices": 256}, k=3)
    assert {"tpu-communication-bound-halve-model-parallel", "tpu-mesh-ici-vs-dcn"} <= {r.entry.id for r in ranked}
    assert all(r.entry.families == ["tpu"] for r in ranked)


def test_pipeline_bubble_interleaves_or_uses_zero_bubble():
    ranked = retrieve("pipeline_bubble", {"family": "hopper", "model_kind": "dense", "framework": "megatron",
                                          "devices": 64}, k=3)
    assert any(m.get("vpp") == "x2" or m.get("schedule") == "=zb" for m in _moves(ranked[0]))
    assert {"interleaved-pipeline-vpp", "zero-bubble-schedule"} <= {r.entry.id for r in ranked}


def test_host_bound_gpu_uses_cuda_graphs_or_compile():
    for framework in ("megatron", "torchtitan"):
        top = retrieve("host", {"family": "hopper", "model_kind": "dense", "framework": framework, "devices": 8})[0]
        assert top.entry.id in ("cuda-graphs-launch-overhead", "torch-compile-fusion")


def test_moe_communication_on_h100_uses_hierarchical_dedup_all_to_all():
    top = retrieve("communication", {"family": "hopper", "model_kind": "moe", "framework": "megatron",
                                     "devices": 128, "accelerator": "h100-sxm"})[0]
    assert top.entry.id == "moe-hierarchical-alltoall-dedup"
    assert {"dispatcher": "=dedup"} in _moves(top)


def test_imbalance_moe_and_long_context():
    top = retrieve("imbalance", {"family": "hopper", "model_kind": "moe", "framework": "torchtitan"})[0]
    assert top.entry.id == "moe-load-imbalance"
    ranked = retrieve("imbalance", {"family": "hopper", "model_kind": "dense", "long_context": True},
                      query="packed documents attention")
    assert ranked[0].entry.id == "attention-aware-data-balancing"


def test_applicability_demotes_but_does_not_remove(entries):
    ranked = retrieve("communication", {"family": "hopper", "model_kind": "dense"}, k=len(entries))
    assert len(ranked) == len(entries)
    ids = [r.entry.id for r in ranked]
    # a TPU-only communication entry stays in the list but below the GPU one that fits
    assert ids.index("tp-within-nvlink-domain") < ids.index("tpu-mesh-ici-vs-dcn")
    tpu = ranked[ids.index("tpu-mesh-ici-vs-dcn")]
    assert "exclude" in tpu.why
    # a MoE-only entry is demoted for a dense model
    assert ids.index("tp-within-nvlink-domain") < ids.index("moe-hierarchical-alltoall-dedup")


def test_ranking_is_deterministic_and_ordered(entries):
    workload = {"family": "cdna3", "model_kind": "moe", "framework": "megatron", "devices": 512}
    a = retrieve("memory", workload, query="activations", k=10)
    b = retrieve("memory", workload, query="activations", k=10, entries=list(reversed(entries)))
    assert [(r.entry.id, r.score) for r in a] == [(r.entry.id, r.score) for r in b]
    assert all(x.score > y.score or (x.score == y.score and x.entry.id < y.entry.id) for x, y in zip(a, a[1:], strict=False))
    assert all(r.why for r in a)


def test_query_words_steer_the_ranking():
    workload = {"family": "hopper", "model_kind": "dense", "framework": "megatron"}
    top = retrieve("memory", workload, query="zero optimizer states gradients parameters sharded")[0]
    assert top.entry.id == "zero-stages"


def test_bad_retrieval_input():
    with pytest.raises(AsapError, match="bottleneck"):
        retrieve("disk", {})
    with pytest.raises(AsapError, match="k"):
        retrieve("compute", {}, k=0)
    assert retrieve("compute", {}, entries=[]) == []


def test_every_class_has_two_entries_with_moves_and_sources(entries):
    from asap.spec.words import BOTTLENECK_CLASSES

    for cls in BOTTLENECK_CLASSES:
        having = [e for e in entries if cls in e.classes and e.moves and e.sources]
        assert len(having) >= 2, cls
    for cls in ("tp_comm", "ep_comm", "dp_comm", "memory_capacity", "compute"):  # TPU advice where it differs
        assert any(cls in e.classes and e.families == ["tpu"] for e in entries), cls


@pytest.mark.parametrize("cls", ["ep_comm", "tp_comm", "memory_capacity", "pipeline_bubble", "expert_imbalance",
                                 "stage_imbalance", "host", "compute"])
def test_strict_retrieval_never_offers_what_does_not_apply(entries, cls):
    """A dense model never gets MoE entries; a TPU job never NVLink (GPU-family) advice; the framework filters."""
    dense_tpu = retrieve(cls, {"family": "tpu", "model_kind": "dense", "framework": "maxtext"}, k=50, strict=True)
    assert all(r.entry.model_kinds == ["any"] or "dense" in r.entry.model_kinds for r in dense_tpu)
    assert all(r.entry.families in (["any"], ["tpu"]) for r in dense_tpu)
    assert all(r.entry.frameworks == ["any"] or "maxtext" in r.entry.frameworks for r in dense_tpu)
    assert all(cls in r.entry.classes for r in dense_tpu)
    assert "tp-within-nvlink-domain" not in {r.entry.id for r in dense_tpu}
    dense_gpu = retrieve("imbalance", {"family": "hopper", "model_kind": "dense"}, k=50, strict=True)
    assert "moe-load-imbalance" not in {r.entry.id for r in dense_gpu}

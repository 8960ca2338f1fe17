"""The planner: acceptance on the calibration cases, the JSON contract, and one-line errors."""

import json

import numpy as np
import pytest

from conftest import assert_one_line_error
from asap.search.planner import plan
from asap.search.pricing import pareto_front
from asap.search.space import enumerate_space, legal_mask
from asap.spec.hardware import cluster_from_dict, load_cluster
from asap.spec.loader import load_model
from asap.spec.model import model_from_dict
from asap.spec.strategy import check_strategy, parse_strategy
from asap.spec.train import TrainSpec
from asap.validate import load_cases
from asap.spec.job import Job

CASES = load_cases()


def case_inputs(case):
    return (model_from_dict(case["model"]), cluster_from_dict(case["cluster"]), TrainSpec.from_dict(case["train"]),
            parse_strategy(case["strategy"]))


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_fix_completes_and_free_plan_is_never_slower(case):
    model, cluster, train, fixed = case_inputs(case)
    fixed_plan = plan(Job.resolve(model, cluster, train), fixed=fixed, top=1, split_candidates=0)
    best_fixed = fixed_plan.candidates[0]
    assert best_fixed.fits
    for k, v in fixed.items():
        assert best_fixed.strategy.to_dict()[k] == v
    free = plan(Job.resolve(model, cluster, train), top=1, split_candidates=0).candidates[0]
    assert free.fits and free.step_time_s <= best_fixed.step_time_s + 1e-9


def test_space_agrees_with_the_scalar_legality_rules():
    """Every enumerated strategy passes check_strategy; the vectorized mask rejects what it rejects."""
    model, train = load_model("qwen3-30b-a3b"), TrainSpec(64, 4096)
    S = enumerate_space(model, 32, 8, train, {})
    assert len(S) > 1000
    rng = np.random.default_rng(0)
    for i in rng.choice(len(S), 300, replace=False):
        check_strategy(S.strategy(int(i)), model, train, 32)
    assert legal_mask(model, train, 32, S).all()


def test_pareto_front_is_non_dominated():
    step = np.array([1.0, 2.0, 3.0, 1.5, 2.5])
    mem = np.array([9.0, 5.0, 4.0, 9.5, 6.0])
    front = list(pareto_front(step, mem))
    assert front == [0, 1, 2]


def test_plan_json_contract(cli):
    p = cli("plan", "--model", "llama3-70b", "--cluster", "dgx-h100-8", "--global-batch", "256", "--seq-len", "8192",
            "--fix", "pp=4", "--top", "3", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert len(d["candidates"]) == 3 and d["searched"] > 100 and d["search_time_s"] > 0
    steps = [c["step_time_s"] for c in d["candidates"]]
    assert steps == sorted(steps)
    assert all(c["fits"] and c["strategy"]["pp"] == 4 for c in d["candidates"])
    split = d["candidates"][0]["stage_split"]
    assert sum(split["layers_per_stage"]) == 80
    assert d["candidates"][0]["step_time_s"] <= split["default_split_step_time_s"] * (1 + 1e-9)
    assert split["adopted"] == (split["layers_per_stage"] != split["default_layers_per_stage"])
    assert all(c["memory_limit_gb"] == d["memory_limit_gb"] and c["peak_memory_gb"] <= c["memory_limit_gb"]
               for c in d["candidates"])
    assert d["headroom_gb"] == pytest.approx(0.08 * d["device_memory_gb"])  # the default headroom
    assert d["pareto"]


def test_tpu_plan_shows_maxtext_mesh(cli):
    p = cli("plan", "--model", "llama3-8b", "--cluster", "v5p-512", "--global-batch", "256", "--seq-len", "8192",
            "--top", "2", "--json")
    d = json.loads(p.stdout)
    mesh = d["candidates"][0]["mesh"]
    product = np.prod([v for k, v in mesh.items() if k.startswith("ici_")])
    assert product == 256
    assert {"ici_fsdp_parallelism", "ici_tensor_parallelism"} & set(mesh) or "ici_data_parallelism" in mesh


def test_plan_bad_inputs(cli):
    job = ["--model", "llama3-70b", "--cluster", "dgx-h100-8", "--global-batch", "256", "--seq-len", "8192"]
    assert_one_line_error(cli("plan", *job, "--fix", "tp=3"), "fix.dp", "not divisible")
    mixtral = ["--model", "mixtral-8x22b", "--cluster", "h100-sxm", "--nodes", "6", "--global-batch", "240",
               "--seq-len", "4096"]
    assert_one_line_error(cli("plan", *mixtral, "--fix", "tp=6"), "fix.tp", "num_kv_heads")
    # (a 70B fits one node with its optimizer on the host: tests/cost/test_offload.py; a 405B's weights and gradients do not)
    small = ["--model", "llama3.1-405b", "--cluster", "dgx-h100-1", "--global-batch", "256", "--seq-len", "8192"]
    assert_one_line_error(cli("plan", *small), "no strategy fits in 73.28 GiB", "79.65 less 6.37 GiB of headroom",
                          "smallest needs")
    assert_one_line_error(cli("plan", *small, "--memory-margin", "0"), "no strategy fits in 79.65 GiB per device (")
    assert_one_line_error(cli("plan", *job, "--fix", "recompute=none,tp=1,pp=1,cp=1,zero=0"),
                          "no strategy fits", "smallest needs")


TIE = 0.01  # shapes predicted within 1% count as tied: below what the model resolves (bucket edges, jitter)


def best_shapes(result) -> list[tuple[tuple[int, int], float]]:
    """Distinct (tp, pp) shapes with their fastest step time, fastest first."""
    best: dict[tuple[int, int], float] = {}
    for est in result.candidates:
        best.setdefault((est.strategy.tp, est.strategy.pp), est.step_time_s)
    return list(best.items())


def shape_rank(result, shape) -> int:
    """Competition rank of ``shape``: 1 + the distinct shapes predicted faster by more than TIE."""
    shapes = dict(best_shapes(result))
    assert shape in shapes, f"{shape} not among the fitting candidates"
    return 1 + sum(t < shapes[shape] * (1 - TIE) for s, t in shapes.items() if s != shape)


LARGE_DENSE = [c for c in CASES if not c["model"].get("moe") and model_from_dict(c["model"]).num_params() >= 100e9]
# Megatron-Core's weak-scaling runs kept TP = 8 where the model prices TP = 4 at 6.5-8% faster: TP = 8 sends twice
# the TP traffic per device, and whether a run hid it behind GEMMs (--tp-comm-overlap) is not an input (the
# Hopper family hides 30%). Known, reported in the note of issue 3; strict, so a fix shows up here.
# MaxText's 1T run on 2048 v5p keeps tp=16 on one ICI axis; XLA's collective matmul hides TP traffic the TPU
# family does not hide (tp_overlap = 0), so tp=16 ranks 20th (the accuracy issue, XLA overlap).
# The 177B weak-scaling run's published shape was among the five best since the pipeline hand-offs (as Megatron
# runs them) and data-parallel overlap (shared links, the step boundary), at the edge: its tp=8 pp=6 (5.047 s)
# ranked 5th, tp=4 pp=12 (4.998 s) 0.01% inside the 1% tie. With every gradient bucket its own collective and
# the step's fixed terms (asap.cost.step_fixed) both move ~0.3% (5.062 s against 5.012 s) and tp=4 pp=12 leaves
# the tie by 0.004%: the gap is the same TP traffic (tp=8's exposed 0.60 s against tp=4's 0.25 s), so it is back.
TP_TRAFFIC = {"mcore_h100_weak_119B", "maxtext_1024b_v5p-2048", "mcore_h100_weak_177B"}
# With the layout priced device by device, tp=2 cp=2 pp=8 vpp=8 fits the 119B run in 79.2 of 80 GiB (the old
# first/middle/last pricing put 12 layers at the second stage's in-flight count: 80.2 GiB) and is priced 10.5%
# faster than the published tp=8 pp=4: inside NEAR (12%) since the held-out error was measured per source.
THIN_MEMORY_MARGIN: set[str] = set()
NEAR = 0.12  # "near the best": inside the cost model's held-out error (docs/accuracy.md: Hopper 12.8%, all 11.5%)


def _large_dense_params(known_misses=frozenset(), reason="TP traffic, see TP_TRAFFIC"):
    return [pytest.param(c, id=c["id"], marks=[pytest.mark.xfail(strict=True, reason=reason)]
                         if c["id"] in known_misses else []) for c in LARGE_DENSE]


@pytest.mark.parametrize("case", _large_dense_params(TP_TRAFFIC))
def test_published_shape_is_among_the_five_best(case):
    """For the large dense runs (>= 100B parameters), the published (tp, pp) is among the five fastest distinct
    shapes the planner finds when the run's other published choices (ZeRO stage, recompute, cp) are kept.

    Those choices were limits of the software, not free knobs: Megatron-LM in 2021-22 had no distributed
    optimizer and no context parallelism, so TP = 8 and deep pipelines were what fitted. With every knob free
    the planner prefers TP = 4 with ZeRO-1 for these models, as NVIDIA itself does once it has those knobs
    (test_expert_tuned_shapes_are_near_the_best)."""
    model, cluster, train, fixed = case_inputs(case)
    published = (fixed.get("tp", 1), fixed.get("pp", 1))
    keep = {k: v for k, v in fixed.items() if k not in ("tp", "pp", "dp", "vpp", "mbs")}
    result = plan(Job.resolve(model, cluster, train), fixed=keep, top=5000, split_candidates=0)
    assert shape_rank(result, published) <= 5, best_shapes(result)[:6]


def assert_near_the_best(result, shape):
    shapes = dict(best_shapes(result))
    best = min(shapes.values())
    assert shape in shapes and shapes[shape] <= best * (1 + NEAR), (shape, shapes.get(shape), best_shapes(result)[:6])


@pytest.mark.parametrize("case", _large_dense_params(THIN_MEMORY_MARGIN, "see THIN_MEMORY_MARGIN"))
def test_published_shape_is_near_the_best(case):
    """With every knob free, the published (tp, pp) of every large dense run is predicted within NEAR of the
    planner's best shape: the planner never calls an expert's shape a poor choice (typically a tenth to a
    quarter of the distinct shapes are that close)."""
    model, cluster, train, fixed = case_inputs(case)
    result = plan(Job.resolve(model, cluster, train), top=5000, split_candidates=0)
    assert_near_the_best(result, (fixed.get("tp", 1), fixed.get("pp", 1)))


# Configurations NVIDIA tuned for MLPerf Training with today's knobs (distributed optimizer, TP communication
# overlap, fp8, context parallelism) — shapes the cost model was never fitted to. Sources (config_*.sh, whose
# README defines miniBS = GBS / DP): mlcommons/training_results_v4.0 NVIDIA/benchmarks/gpt3/implementations/nemo/
# config_DGXH100_64x8x128x4x8_mbs2.sh and config_DGXH100_1344x8x6x4x6_mbs1_cg.sh; mlcommons/training_results_v5.1
# NVIDIA/benchmarks/llama31_405b/implementations/theia_ngpu512_ngc25.09_nemo/config_DGXB200_64x8x144xtp4pp8cp2_cg.sh.
EXPERT_TUNED = [
    ("gpt3-175b", "h100-sxm", 64, 2048, 2048, (4, 8)),
    ("gpt3-175b", "h100-sxm", 1344, 2688, 2048, (4, 6)),
    ("llama3.1-405b", "b200", 64, 1152, 8192, (4, 8)),
]


@pytest.mark.parametrize("name,accelerator,nodes,global_batch,seq_len,shape", EXPERT_TUNED,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}n" for c in EXPERT_TUNED])
def test_expert_tuned_shapes_are_near_the_best(name, accelerator, nodes, global_batch, seq_len, shape):
    """With every knob free, the (tp, pp) NVIDIA chose for its MLPerf submissions (TP = 4 with the distributed
    optimizer, where 2021 Megatron needed TP = 8) is predicted within NEAR of the planner's best shape; on 512
    H100 it is the planner's second shape."""
    result = plan(Job.resolve(load_model(name), load_cluster(accelerator, nodes=nodes), TrainSpec(global_batch, seq_len, "fp8")), top=5000, split_candidates=0)
    assert_near_the_best(result, shape)
    if nodes == 64 and name == "gpt3-175b":
        # third since fp8 runs keep their weights in fp8 only (fp8_param): tp = 2 shapes fit with less recompute
        assert shape_rank(result, shape) <= 3, best_shapes(result)[:6]

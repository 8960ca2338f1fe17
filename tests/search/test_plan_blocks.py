"""The block-wise planner against a straightforward reference: the whole space enumerated at once, every row
priced in one batch, one global ranking (what ``plan`` did before it went block by block)."""

import time

import numpy as np
import pytest

from asap.cost.estimate import UNIT_KEYS, estimate_batch, estimate_from_batch
from asap.cost.batch import expand
from asap.cost.device_memory import fits_memory, memory, usable_hbm_gb
from asap.cost.units import device_figures, unit_times
from asap.search.planner import plan
from asap.search.nofit import NoFitError
from asap.search.pricing import Deadline, Kept, Search, bound_pool_rows, first_per_shape, pareto_front, search_space
from asap.search.space import Space, chunk_order, enumerate_space
from asap.spec.hardware import cluster_from_dict, load_cluster
from asap.spec.loader import load_model
from asap.spec.model import model_from_dict
from asap.spec.strategy import format_compact, parse_strategy
from asap.spec.train import TrainSpec
from asap.validate import load_cases
from asap.spec.job import Job

CASES = {c["id"]: c for c in load_cases()}
# a dense model, a pipelined one, a MoE model with expert parallelism across nodes, an FSDP MoE job
PICKED = ("megatron2021_t1_39.1B", "mbridge_llama3_70b_h100_64gpu_fp8", "mbridge_qwen3_30b_a3b_h100_16gpu_fp8",
          "modelzoo_qwen3_235b_h100_256gpu_intranode_ep8_fsdp")


def inputs(cid):
    case = CASES[cid]
    return (model_from_dict(case["model"]), cluster_from_dict(case["cluster"]), TrainSpec.from_dict(case["train"]),
            parse_strategy(case["strategy"]))


def reference(model, cluster, train, fixed, top_k, distinct, include_oom=False, as_estimates=False,
              oom_by_memory=False):
    """(ranked rows as strategy strings with their step times, the Pareto front likewise, space, fitting)."""
    job = Job.resolve(model, cluster, train)
    fw = job.framework
    # the free dispatcher named per row as plan names it (its memory is its dispatcher's)
    S = enumerate_space(model, cluster.num_devices, cluster.topology.domain_size, train, fixed, fw, priced_for=job)
    ut = unit_times(job, S, UNIT_KEYS)
    f = device_figures(model, train, S, ut, fw.selective)
    mem = memory(model, cluster.accelerator, train, S, figures=f, framework=fw)
    peak = mem.peak_gb
    fits = fits_memory(mem, cluster.accelerator, train)
    rows = np.arange(len(S)) if include_oom else np.nonzero(fits)[0]
    be = estimate_batch(job, S.take(rows))
    step = be.step_time_s
    by_step = np.argsort(step, kind="stable")
    over = (np.maximum(peak[rows] - usable_hbm_gb(cluster.accelerator, train), 0.0) if oom_by_memory
            else np.zeros(len(rows)))
    by_rank = np.lexsort((np.arange(len(rows)), peak[rows], step, over))  # equal times: less memory first
    shown = first_per_shape(S.take(rows), by_rank) if distinct else by_rank
    front = pareto_front(step, peak[rows], by_step)
    listed = lambda idx: [(str(S.strategy(int(rows[i]))), float(step[i])) for i in idx]  # noqa: E731
    estimates = lambda idx: [(str(estimate_from_batch(job, S.take(rows), be, int(i)).strategy),  # noqa: E731
                              float(step[i])) for i in idx]
    if as_estimates:  # the priced dispatcher of a row left to the fastest, as plan's candidates show it
        listed = estimates
    return listed(shown[:top_k]), listed(front), len(S), int(fits.sum())


def blockwise(model, cluster, train, fixed, top_k, distinct, include_oom=False, block_rows=512, oom_by_memory=False):
    job = Job.resolve(model, cluster, train)
    fw = job.framework
    space = Space.of(model, cluster.num_devices, cluster.topology.domain_size, train, fixed, fw, priced_for=job)
    s = search_space(Search(job, include_oom, top_k, distinct, oom_by_memory=oom_by_memory), space,
                     chunk_rows=block_rows)
    k = s.kept
    by_step = k.by_step()
    shown = first_per_shape(k.S, k.by_rank()) if distinct else k.by_rank()
    front = pareto_front(k.step, k.mem.peak_gb, by_step)
    listed = lambda idx: [(str(k.S.strategy(int(i))), float(k.step[i])) for i in idx]  # noqa: E731
    return listed(shown[:top_k]), listed(front), s.space, s.fitting, s


@pytest.mark.parametrize("cid", PICKED)
@pytest.mark.parametrize("free", [True, False], ids=["free", "fixed"])
def test_small_blocks_rank_like_the_whole_space(cid, free):
    """Hundreds of blocks of 512 rows, merged: the same ranked rows, front and counts as one global ranking."""
    model, cluster, train, fixed = inputs(cid)
    fixed = {} if free else {k: v for k, v in fixed.items() if k in ("tp", "mbs")}
    for distinct in (True, False):
        want = reference(model, cluster, train, fixed, 8, distinct)
        got = blockwise(model, cluster, train, fixed, 8, distinct)
        assert got[0] == want[0] and got[2:4] == want[2:4]
        # the front: the same times; of two rows equal in time and memory (a host-bound MoE layer prices ep4 etp2
        # and ep8 etp1 alike) either may stand for the point, the reference keeps its enumeration's first
        assert [t for _, t in got[1]] == [t for _, t in want[1]]
        # only what the result can show is kept: the ranked rows, the front, the rows the split search may try
        assert len(got[4].kept.step) <= 8 + len(want[1]) + bound_pool_rows(8)


def test_include_oom_blocks_rank_every_row():
    model, cluster, train, fixed = inputs("mbridge_llama3_70b_h100_64gpu_fp8")
    want = reference(model, cluster, train, {"pp": 8}, 6, False, include_oom=True)
    got = blockwise(model, cluster, train, {"pp": 8}, 6, False, include_oom=True, block_rows=300)
    assert got[:4] == want


@pytest.mark.parametrize("distinct", [True, False])
def test_include_oom_blocks_rank_what_does_not_fit_by_how_far_over(distinct):
    """plan --include-oom: the rows that fit first, fastest first, then the rest least over memory first,
    block by block as over the whole space at once."""
    model, cluster, train, fixed = inputs("mbridge_llama3_70b_h100_64gpu_fp8")
    want = reference(model, cluster, train, {"pp": 8}, 6, distinct, include_oom=True, oom_by_memory=True)
    got = blockwise(model, cluster, train, {"pp": 8}, 6, distinct, include_oom=True, block_rows=300,
                    oom_by_memory=True)
    assert got[:4] == want


@pytest.mark.parametrize("cid", PICKED)
def test_plan_matches_the_reference(cid):
    """``plan`` itself (default blocks, no ILP so its candidates are the ranking's): candidates, pareto,
    searched, space and fitting as the reference's."""
    model, cluster, train, _ = inputs(cid)
    r = plan(Job.resolve(model, cluster, train), top=5, split_candidates=0)
    shown, front, space, fitting = reference(model, cluster, train, {}, 5, True, as_estimates=True)
    assert [(str(e.strategy), e.step_time_s) for e in r.candidates] == shown
    assert [(str(e.strategy), e.step_time_s) for e in r.pareto] == front
    assert (r.searched, r.space, r.fitting, r.stopped_early) == (space, space, fitting, False)


def test_blocks_are_the_space_in_pieces_spread_over_it():
    """Every mesh shape once; the first block a sample spread over the whole space (bit-reversed), and the
    second half of the space reached before the first half is done; the blocks' rows put back in mesh order
    are ``enumerate_space`` row for row."""
    model, cluster, train, _ = inputs("mbridge_qwen3_30b_a3b_h100_16gpu_fp8")
    job = Job.resolve(model, cluster, train)
    fw = job.framework
    space = Space.of(model, cluster.num_devices, cluster.topology.domain_size, train, {}, fw)
    blocks = list(space.blocks(2000))
    assert len(blocks) > 5
    meshes = np.concatenate([b[0] for b in blocks])
    assert sorted(meshes.tolist()) == list(range(space.n_mesh))
    assert blocks[0][0].tolist() == sorted(chunk_order(space.n_mesh)[:len(blocks[0][0])])
    assert blocks[0][0].max() >= space.n_mesh // 2
    starts = [int(b[0][0]) for b in blocks[1:]]
    half = space.n_mesh // 2
    assert starts.index(next(s for s in starts if s >= half)) < max(i for i, s in enumerate(starts) if s < half)
    whole = enumerate_space(model, cluster.num_devices, cluster.topology.domain_size, train, {}, fw)
    by_mesh = np.argsort(np.concatenate([b[2] for b in blocks]), kind="stable")
    for key in whole.keys():
        assert np.array_equal(np.concatenate([b[1][key] for b in blocks])[by_mesh], whole[key]), key


def test_time_limit_prices_one_chunk_and_counts_all():
    model, cluster, train, _ = inputs("mbridge_qwen3_30b_a3b_h100_16gpu_fp8")
    job = Job.resolve(model, cluster, train)
    fw = job.framework
    n = len(enumerate_space(model, cluster.num_devices, cluster.topology.domain_size, train, {}, fw))
    space = Space.of(model, cluster.num_devices, cluster.topology.domain_size, train, {}, fw)
    deadline = Deadline(time.perf_counter() - 2.0, 1.0)  # already passed
    s = search_space(Search(job, False, 5, True), space, deadline=deadline, chunk_rows=4096)
    assert (s.priced, s.space) == (4096, n)
    assert f"priced 4,096 of {n:,} configurations" in deadline.notes[0]
    r = plan(job, top=3, time_limit_s=1e-9)  # the whole space is one chunk: it is priced
    assert r.stopped_early and r.searched == r.space == n  # stopped before the ILP
    assert r.candidates and r.candidates[0].fits


def test_no_fit_names_the_smallest_row_of_the_space():
    model, cluster, train = load_model("llama3.1-405b"), load_cluster("h100-sxm", devices=8), TrainSpec(64, 8192)
    job = Job.resolve(model, cluster, train)
    fw = job.framework
    S = enumerate_space(model, 8, cluster.topology.domain_size, train, {}, fw)
    peak = memory(model, cluster.accelerator, train, S, framework=fw).peak_gb
    assert peak.min() > cluster.hbm_gb
    with pytest.raises(NoFitError) as e:
        plan(job)
    smallest = format_compact(S.strategy(int(np.argmin(peak))), 8, False, fw)  # the compact notation
    assert f"GiB reserved ({smallest})" in str(e.value)
    assert f"searched {len(S)})" in str(e.value)


def test_ties_go_to_the_earlier_place_whatever_order_blocks_come_in():
    """Equal step times: the row needing less memory ranks first, then (equal memory too) the row earlier in the
    space, though its block was priced last; the front likewise."""
    model, cluster, train, _ = inputs("megatron2021_t1_39.1B")
    job = Job.resolve(model, cluster, train)
    fw = job.framework
    S = enumerate_space(model, cluster.num_devices, cluster.topology.domain_size, train, {}, fw).take(np.arange(40))
    mem = memory(model, cluster.accelerator, train, S, framework=fw)
    step = np.ones(40)

    def kept(idx):
        return Kept(S.take(idx), expand(mem, idx), step[idx], idx.astype(np.int64))

    late, early = kept(np.arange(20, 40)).needed(3, False), kept(np.arange(20)).needed(3, False)
    merged = Kept.concatenate([late, early]).needed(3, False)
    by = merged.by_step()
    whole = np.lexsort((np.arange(40), mem.peak_gb, step))  # the whole space ranked at once
    assert merged.place[by[:3]].tolist() == whole[:3].tolist()
    front = merged.place[pareto_front(merged.step, merged.mem.peak_gb, by)]
    assert front.tolist() == pareto_front(step, mem.peak_gb, whole).tolist()

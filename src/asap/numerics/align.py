"""Precision alignment: two real runs on the same seed and data, compared operator by operator and loss by loss.

``align(model, a, b, ...)`` trains the same model twice with the reference trainer (two strategies, or two
precisions, or both), each capturing its first step (``asap.numerics.capture``), puts each run's tensors back
in the layout of the unparallelized model (dp rows stitched in dp-rank order, pipeline chunks by their
global layer names) and compares, in this order:

1. forward outputs of every module, in forward execution order (chunk by chunk, call order inside each);
2. gradients of the loss with respect to those outputs, in backward execution order;
3. parameter gradients, in parameter order;

and the loss of every step. The first tensor whose relative error exceeds the tolerance is the first
divergence.

Relative error (norm-wise, so that a few near-zero elements cannot dominate):
``rel(x, y) = ||x - y||_2 / max(||x||_2, ||y||_2, tiny)``, computed in float64.

Tolerance (dtype-aware): ``tol = sqrt(eps)`` of the *stricter* precision of the two runs -- agreement to about
half the significant digits that dtype carries, the usual allowance for rounding that accumulates in a
different order (sqrt(eps) is also the classic finite-difference check bound). Unit roundoffs:
fp32 eps = 2^-23 (tol = 3.45e-4), bf16 eps = 2^-7 (tol = 8.84e-2). Two layouts in fp32 reorder sums
(errors ~1e-6) and align; a bf16 run against an fp32 run rounds every autocast matmul to 8 significant bits
(errors ~2^-9 and up) and diverges at the first operator autocast runs in bf16 -- the point of the check.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asap.errors import AsapError

EPS = {"fp32": 2.0 ** -23, "bf16": 2.0 ** -7}
TINY = 1e-30


def tolerance(precision_a: str, precision_b: str) -> float:
    """sqrt(eps) of the stricter of the two precisions (module docstring)."""
    for p, name in ((precision_a, "a-precision"), (precision_b, "b-precision")):
        if p not in EPS:
            raise AsapError(name, f"must be one of {', '.join(EPS)}, got {p!r}")
    return math.sqrt(min(EPS[precision_a], EPS[precision_b]))


def rel_error(x, y) -> float:
    """||x - y|| / max(||x||, ||y||, tiny) in float64; a shape mismatch is total disagreement (inf)."""
    if tuple(x.shape) != tuple(y.shape):
        return math.inf
    x, y = x.double(), y.double()
    return float((x - y).norm() / max(float(x.norm()), float(y.norm()), TINY))


def loss_rel_diff(loss_a: list[float], loss_b: list[float]) -> float:
    """The largest per-step |a - b| / max(|a|, |b|, tiny)."""
    return max((abs(x - y) / max(abs(x), abs(y), TINY) for x, y in zip(loss_a, loss_b, strict=True)), default=0.0)


@dataclass
class Captured:
    """One run's first step in the unparallelized layout, each section in execution order."""
    forward: dict[str, Any] = field(default_factory=dict)
    grad_output: dict[str, Any] = field(default_factory=dict)
    param_grad: dict[str, Any] = field(default_factory=dict)

    def ops(self) -> list[tuple[str, Any]]:
        """(op label, tensor): forward outputs, then output gradients, then parameter gradients."""
        return ([(n, t) for n, t in self.forward.items()] + [(f"grad:{n}", t) for n, t in self.grad_output.items()]
                + [(f"param_grad:{n}", t) for n, t in self.param_grad.items()])


def _stitch(files: list[dict], section: str, key: str | None) -> dict[str, Any]:
    """One section across ranks: rows of the dp ranks concatenated in dp order; ordered by ``key``."""
    import torch

    rows: dict[str, dict[int, Any]] = {}
    order: dict[str, tuple] = {}
    for f in files:
        for name, t in f[section].items():
            rows.setdefault(name, {})[f["dp_rank"]] = t
            if key is not None:
                order[name] = tuple(f[key][name])
    names = sorted(rows, key=lambda n: order[n]) if key is not None else list(rows)
    if section == "param_grad":  # averaged over dp already: every dp rank holds the same
        return {n: rows[n][min(rows[n])] for n in names}
    return {n: torch.cat([rows[n][d] for d in sorted(rows[n])]) for n in names}


def load_capture(capture_dir: str | Path) -> Captured:
    """Read every ``rank*.pt`` a run wrote (``asap.numerics.capture``) and stitch them into one layout."""
    import torch

    paths = sorted(Path(capture_dir).glob("rank*.pt"))
    if not paths:
        raise AsapError("align", f"the run wrote no capture into {capture_dir}")
    files = [torch.load(p, map_location="cpu", weights_only=False) for p in paths]
    return Captured(forward=_stitch(files, "forward", "forward_key"),
                    grad_output=_stitch(files, "grad_output", "backward_key"),
                    param_grad=_stitch(files, "param_grad", None))


def compare(a: Captured, b: Captured, tol: float) -> tuple[int, dict[str, Any] | None]:
    """(ops compared, the first divergence or None), walking a's execution order; an op one run has and the
    other lacks is an error (the layouts must build the same modules)."""
    ops_a, ops_b = a.ops(), dict(b.ops())
    missing = sorted(set(n for n, _ in ops_a) ^ set(ops_b))
    if missing:
        raise AsapError("align", f"the two runs captured different operators: {', '.join(missing[:5])}"
                                 + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
    first = None
    for name, t in ops_a:
        err = rel_error(t, ops_b[name])
        if first is None and not err <= tol:
            first = {"op": name, "rel_error": err if math.isfinite(err) else None, "tolerance": tol}
    return len(ops_a), first


def _first_loss_divergence(loss_a: list[float], loss_b: list[float], tol: float) -> dict[str, Any] | None:
    for step, (x, y) in enumerate(zip(loss_a, loss_b, strict=True)):
        err = abs(x - y) / max(abs(x), abs(y), TINY)
        if not err <= tol:
            return {"op": f"loss[step {step}]", "rel_error": err, "tolerance": tol}
    return None


def capture_config(model, strategy, precision: str, global_batch: int, seq_len: int, steps: int, seed: int,
                   capture_dir: Path, field_name: str = "strategy"):
    """A RunConfig whose first step is captured into ``capture_dir`` (AsapError for cp > 1: not stitched)."""
    from asap.spec.train import TrainSpec
    from asap.runners.torch.launch import RunConfig, resolve_run_strategy

    text = strategy.to_dict() if hasattr(strategy, "to_dict") else strategy
    s = resolve_run_strategy(text, model, TrainSpec(global_batch, seq_len, precision), field_name=field_name)
    if s.cp > 1:
        raise AsapError(field_name, "align does not stitch context-parallel shards (cp > 1)")
    return RunConfig(model=model, strategy=s, global_batch=global_batch, seq_len=seq_len, steps=steps,
                     precision=precision, seed=seed, capture_dir=str(capture_dir),
                     first_step_hook="asap.numerics.capture:install")


def run_pair(model, a: str, b: str, *, precision_a: str = "fp32", precision_b: str = "fp32", global_batch: int,
             seq_len: int, steps: int, seed: int = 0, device: str = "cpu", timeout_s: float | None = None,
             echo=None) -> tuple[Any, Any, Captured, Captured]:
    """Run strategy ``a`` at ``precision_a`` and ``b`` at ``precision_b`` on the same seed and data (one
    torchrun launch when they need the same number of processes): (RunResult a, RunResult b, their captures)."""
    from asap.runners.torch.launch import launch

    if steps < 1:
        raise AsapError("steps", f"must be >= 1, got {steps}")
    with tempfile.TemporaryDirectory(prefix="asap-align-") as tmp:
        work = Path(tmp)
        cfgs = [capture_config(model, text, prec, global_batch, seq_len, steps, seed, work / f"capture_{label}", label)
                for label, text, prec in (("a", a, precision_a), ("b", b, precision_b))]
        kw = dict(device=device, timeout_s=timeout_s, echo=echo)
        if cfgs[0].strategy.devices == cfgs[1].strategy.devices:
            res_a, res_b = launch(cfgs, workdir=str(work / "run"), **kw)
        else:
            res_a = launch(cfgs[:1], workdir=str(work / "run_a"), **kw)[0]
            res_b = launch(cfgs[1:], workdir=str(work / "run_b"), **kw)[0]
        return res_a, res_b, load_capture(cfgs[0].capture_dir), load_capture(cfgs[1].capture_dir)


def report(loss_a: list[float], loss_b: list[float], cap_a: Captured, cap_b: Captured, tol: float) -> dict[str, Any]:
    """The ``asap align --json`` document: aligned when no operator and no step's loss differs beyond tol."""
    ops, first = compare(cap_a, cap_b, tol)
    first = first or _first_loss_divergence(loss_a, loss_b, tol)
    return {"aligned": first is None, "loss_a": loss_a, "loss_b": loss_b,
            "max_loss_rel_diff": loss_rel_diff(loss_a, loss_b), "ops_compared": ops, "first_divergence": first}


def align(model, a: str, b: str, *, precision_a: str = "fp32", precision_b: str = "fp32", **run_kw) -> dict[str, Any]:
    """Two real runs (``run_pair``) compared at the tolerance of the stricter precision (``report``)."""
    tol = tolerance(precision_a, precision_b)
    res_a, res_b, cap_a, cap_b = run_pair(model, a, b, precision_a=precision_a, precision_b=precision_b, **run_kw)
    return report(res_a.losses, res_b.losses, cap_a, cap_b, tol)


def capture_run(model, strategy, *, precision: str, global_batch: int, seq_len: int, steps: int, seed: int = 0,
                device: str = "cpu", timeout_s: float | None = None) -> tuple[Any, Captured]:
    """One real run of ``strategy`` with its first step captured: (RunResult, Captured)."""
    from asap.runners.torch.launch import launch

    with tempfile.TemporaryDirectory(prefix="asap-align-") as tmp:
        cfg = capture_config(model, strategy, precision, global_batch, seq_len, steps, seed, Path(tmp) / "capture")
        res = launch([cfg], device=device, timeout_s=timeout_s, workdir=str(Path(tmp) / "run"))[0]
        return res, load_capture(cfg.capture_dir)


class NumericsCheck:
    """``asap tune --verify-numerics``: ``check(reference, candidate)`` runs the candidate strategy (and, once,
    the reference) for ``steps`` steps on the same seed and data and returns None when they align, else the
    one-line reason. The reference's capture is kept, so every later candidate costs one short run."""

    def __init__(self, model, global_batch: int, seq_len: int, precision: str = "fp32", *, steps: int = 2,
                 device: str = "cpu", timeout_s: float | None = None, candidate_precision: str | None = None):
        self.model, self.steps, self.device, self.timeout_s = model, steps, device, timeout_s
        self.global_batch, self.seq_len = global_batch, seq_len
        self.precision, self.candidate_precision = precision, candidate_precision or precision
        self.tol = tolerance(self.precision, self.candidate_precision)
        self._references: dict[str, tuple[Any, Captured]] = {}

    def _run(self, strategy, precision: str) -> tuple[Any, Captured]:
        return capture_run(self.model, strategy, precision=precision, global_batch=self.global_batch,
                           seq_len=self.seq_len, steps=self.steps, device=self.device, timeout_s=self.timeout_s)

    def __call__(self, reference, candidate) -> str | None:
        from asap.runners.torch.launch import RunFailed

        try:
            if str(reference) not in self._references:
                self._references[str(reference)] = self._run(reference, self.precision)
            ref_res, ref_cap = self._references[str(reference)]
            res, cap = self._run(candidate, self.candidate_precision)
            out = report(ref_res.losses, res.losses, ref_cap, cap, self.tol)
        except (RunFailed, AsapError) as e:
            return f"numerics: could not compare with {reference} ({getattr(e, 'reason', e)})"
        d = out["first_divergence"]
        if d is None:
            return None
        err = "shapes differ" if d["rel_error"] is None else f"relative error {d['rel_error']:.3g}"
        return (f"numerics: not aligned with the first trial ({reference}): {d['op']} {err} > tolerance "
                f"{d['tolerance']:.3g}")

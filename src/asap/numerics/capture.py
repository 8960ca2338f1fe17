"""Capture one training step's numerics inside the reference trainer's workers (``asap.runners.torch.worker``).

While armed (the first step of a job whose ``capture_dir`` is set), hooks on every module of this rank's
model parts record the module's forward output and the gradient of the loss with respect to that output, one
tensor per micro-batch, concatenated along the batch dimension in micro-batch order (every schedule the
trainer runs -- plain accumulation, GPipe, 1F1B, interleaved -- runs a stage's micro-batches in order). Only
the last ``n_micro`` calls count: torch's pipeline stages run their modules once more (forward and backward)
on placeholder tensors to infer shapes before the first step's schedule starts. After
the backward the parameter gradients are recorded too. Then ``save`` brings every tensor to the layout of the
unparallelized model and writes one ``rank{r}.pt`` per (dp rank, pipeline rank) into the capture directory:

* names: ``Transformer.named_modules`` names. Pipeline chunks keep the global layer keys (``layers.5`` stays
  ``layers.5`` on whichever stage holds it); checkpoint wrappers are looked through.
* tensor parallelism: the local outputs of a tp group are all-gathered and put back together by the layout
  the trainer gave them (``tp_layout``): a column-parallel Linear's output is split on its last dimension, a
  sequence-parallel tensor on dimension 1 (sequence), a DTensor says so in its placements; everything else
  is replicated and taken from tp rank 0. Inside an MoE layer under tp each rank routes its own slice of the
  sequence, flattened to (tokens, ...) rows (``tokens`` layout): gathered as (batch, seq/tp, ...) blocks
  concatenated on the sequence. Parameter gradients are DTensors: ``full_tensor()``; routed experts' are
  gathered over the etp and ep groups (``expert_grads``).
* data parallelism: each file holds its dp rank's rows (``asap.runners.torch.data.local_rows``);
  ``asap.numerics.align`` stitches them in dp-rank order. Output gradients are scaled to d(global loss)/d(out):
  the global loss is the mean of the dp ranks' losses, so a rank's local gradient is divided by dp; the
  pipeline schedules also leave out the 1/micro-batches that plain accumulation puts into the loss
  (torch's ``scale_grads`` divides parameter gradients only), so those output gradients are divided by it too.

Everything is stored in float32 (bf16 upcasts exactly).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

WRAPPED = "._checkpoint_wrapped_module"


def module_names(part: nn.Module) -> list[tuple[str, nn.Module]]:
    """(global name, module) for every module worth capturing: not the root, not containers, not the
    checkpoint wrappers themselves (their wrapped module stands in under the wrapper's name), not the routed
    experts (their input and output are tokens in the dispatcher's order, which depends on the layout; the MoE
    layer's output, in token order, is compared instead)."""
    from asap.runners.torch.model import GroupedExperts

    out = []
    for name, m in part.named_modules():
        if (not name or isinstance(m, (nn.ModuleDict, nn.ModuleList, GroupedExperts))
                or type(m).__name__ == "CheckpointWrapper"):
            continue
        out.append((name.replace(WRAPPED, ""), m))
    return out


def _placement_layout(placements) -> str:
    p = placements[0]
    if p.is_shard():
        return f"shard:{p.dim}"
    return "partial" if p.is_partial() else "replicate"


def tp_layout(module: nn.Module, t: torch.Tensor, seq_len: int, tp: int, sp: bool) -> str:
    """How a local tensor of ``module``'s output (or its gradient) lies over the tp group: ``shard:-1`` for
    a column-parallel Linear that keeps its output local (its weight is a DTensor sharded on dim 0 and the
    output is as wide as the local weight), ``shard:1`` for a sequence-parallel activation (sequence length
    seq_len/tp), else ``replicate``."""
    from torch.distributed.tensor import DTensor

    if tp == 1:
        return "replicate"
    w = getattr(module, "weight", None)
    if isinstance(module, nn.Linear) and isinstance(w, DTensor) and _placement_layout(w.placements) == "shard:0":
        if t.shape[-1] == w.to_local().shape[0] != w.shape[0]:
            return "shard:-1"
    if sp and t.dim() >= 2 and t.shape[1] == seq_len // tp != seq_len:
        return "shard:1"
    return "replicate"


class Capture:
    """Hooks on this rank's model parts; ``arm`` before the step, ``disarm`` after its backward."""

    def __init__(self, stage_parts: list[tuple[int, nn.Module]], *, seq_len: int, tp: int, sp: bool,
                 grad_scale: float, n_micro: int):
        self.seq_len, self.tp, self.sp, self.grad_scale, self.n_micro = seq_len, tp, sp, grad_scale, n_micro
        self.armed = False
        self.calls = 0
        self.forward: dict[str, list[torch.Tensor]] = {}
        self.grad_output: dict[str, list[torch.Tensor]] = {}
        self.layouts: dict[str, str] = {}
        self.forward_key: dict[str, tuple[int, int]] = {}  # (chunk, call order inside the chunk)
        self.backward_key: dict[str, tuple[int, int]] = {}  # (-chunk, call order): backward runs chunks last first
        self.param_grad: dict[str, torch.Tensor] = {}
        self.token_modules = {n for _, part in stage_parts for n in moe_token_modules(part)} if tp > 1 else set()
        self.handles = [m.register_forward_hook(self._hook(chunk, name))
                        for chunk, part in stage_parts for name, m in module_names(part)]

    def _hook(self, chunk: int, name: str):
        def on_forward(module, args, out):
            if not self._recording(out):
                return
            local, layout = self._local(module, out, name)
            self.layouts.setdefault(name, layout)
            self.forward.setdefault(name, []).append(local)
            self.calls += 1
            self.forward_key[name] = (chunk, self.calls)  # the order of its last (real) call
            if out.requires_grad:
                out.register_hook(self._grad_hook(module, chunk, name))
        return on_forward

    def _grad_hook(self, module: nn.Module, chunk: int, name: str):
        fired = False

        def on_grad(grad):
            # once per forward call: a zero-bubble schedule backpropagates each micro-batch twice, the input
            # gradients (B) and then the weight gradients (W) from the same graph, which fires the hook again
            nonlocal fired
            if fired:
                return
            fired = True
            local, layout = self._local(module, grad, name)
            self.layouts.setdefault("grad:" + name, layout)
            self.grad_output.setdefault(name, []).append(local * self.grad_scale)
            self.calls += 1
            self.backward_key[name] = (-chunk, self.calls)
        return on_grad

    def _recording(self, out: Any) -> bool:
        """Armed, a real tensor (pipeline shape inference runs on meta tensors) and not a recomputation
        inside the backward (activation checkpointing runs the forward a second time)."""
        return (self.armed and isinstance(out, torch.Tensor) and not out.is_meta
                and torch._C._current_graph_task_id() == -1)

    def _local(self, module: nn.Module, t: torch.Tensor, name: str) -> tuple[torch.Tensor, str]:
        from torch.distributed.tensor import DTensor

        if name in self.token_modules:
            return (t.to_local() if isinstance(t, DTensor) else t).detach().float().clone(), "tokens"
        if isinstance(t, DTensor):
            return t.to_local().detach().float().clone(), _placement_layout(t.placements)
        return t.detach().float().clone(), tp_layout(module, t, self.seq_len, self.tp, self.sp)

    def arm(self) -> None:
        self.armed = True

    def after_backward(self, job: dict, parts, dims) -> None:
        """The worker's call after the first step's backward (``asap.runners.torch.worker.first_step_hook``)."""
        finish(self, job, parts, dims)

    @torch.no_grad()
    def disarm(self, parts: list[nn.Module]) -> None:
        """Stop recording and take the parameter gradients (call on every rank: DTensors gather)."""
        from torch.distributed.tensor import DTensor

        self.armed = False
        for h in self.handles:
            h.remove()
        for part in parts:
            for name, p in part.named_parameters():
                if p.grad is not None:
                    g = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
                    self.param_grad[name.replace(WRAPPED, "")] = g.detach().float().cpu().clone()
            self.param_grad.update(expert_grads(part))

    def _batch(self, name: str, calls: list[torch.Tensor]) -> torch.Tensor:
        """The step's micro-batches of one module, in order: its last n_micro calls."""
        if len(calls) < self.n_micro:
            raise RuntimeError(f"capture: {name} ran {len(calls)} times in a step of {self.n_micro} micro-batches")
        return torch.cat(calls[-self.n_micro:])

    def save(self, path: Path, tp_group, *, keep: bool, info: dict[str, Any]) -> None:
        """Gather the tp shards (every tp rank calls this, in the same order) and, when ``keep``, write."""
        seq = self.seq_len
        forward = {n: gather_tp(self._batch(n, ts), self.layouts[n], tp_group, self.tp, seq)
                   for n, ts in sorted(self.forward.items())}
        grads = {n: gather_tp(self._batch(n, ts), self.layouts["grad:" + n], tp_group, self.tp, seq)
                 for n, ts in sorted(self.grad_output.items())}
        if keep:
            path.parent.mkdir(parents=True, exist_ok=True)
            forward, grads = ({n: t.cpu() for n, t in d.items()} for d in (forward, grads))  # CUDA runs too
            torch.save({**info, "forward": forward, "grad_output": grads, "param_grad": self.param_grad,
                        "forward_key": self.forward_key, "backward_key": self.backward_key}, path)


def expert_grads(part: nn.Module) -> dict[str, torch.Tensor]:
    """The routed experts' full gradients: each rank holds num_experts/ep experts (``asap.runners.torch.parallel.
    apply_ep``: ep rank i the i-th block) and of each a 1/etp slice of the hidden dimension (w1, w3: dim 2;
    w2: dim 1); gathered over the etp group, then the ep group."""
    from asap.runners.torch.model import MoE

    out = {}
    for name, moe in part.named_modules():
        if not isinstance(moe, MoE):
            continue
        for leaf in ("w1", "w2", "w3"):
            p = getattr(moe.experts, leaf)
            if p is None or p.grad is None:
                continue
            g = p.grad.detach().float().contiguous()
            if moe.etp_size > 1:
                g = _all_gather_cat(g, moe.etp_group, moe.etp_size, 1 if leaf == "w2" else 2)
            if moe.ep_size > 1:
                g = _all_gather_cat(g, moe.ep_group, moe.ep_size, 0)
            out[f"{name.replace(WRAPPED, '')}.experts.{leaf}"] = g.cpu()
    return out


def _all_gather_cat(t: torch.Tensor, group, size: int, dim: int) -> torch.Tensor:
    parts = [torch.empty_like(t) for _ in range(size)]
    dist.all_gather(parts, t.contiguous(), group=group)
    return torch.cat(parts, dim=dim)


def moe_token_modules(part: nn.Module) -> list[str]:
    """The modules inside MoE layers that see only this tp rank's tokens (router, shared experts)."""
    from asap.runners.torch.model import MoE

    return [f"{name}.{sub}".replace(WRAPPED, "") for name, moe in part.named_modules() if isinstance(moe, MoE)
            for sub, _ in moe.named_modules() if sub and not sub.startswith("experts")]


def gather_tp(local: torch.Tensor, layout: str, group, tp: int, seq_len: int) -> torch.Tensor:
    """The tensor the tp group holds together: shards concatenated, partial sums added, replicas as one;
    ``tokens``: (batch * seq/tp, ...) rows of each rank, put back in (batch, seq) row-major order."""
    if tp == 1 or layout == "replicate":
        return local
    parts = [torch.empty_like(local) for _ in range(tp)]
    dist.all_gather(parts, local.contiguous(), group=group)
    if layout == "partial":
        return torch.stack(parts).sum(0)
    if layout == "tokens":
        rest = local.shape[1:]
        return torch.cat([p.view(-1, seq_len // tp, *rest) for p in parts], dim=1).reshape(-1, *rest)
    return torch.cat(parts, dim=int(layout.split(":")[1]))


def install(job: dict, stage_parts, dims, n_micro: int) -> Capture | None:
    """The worker's first-step hook (``asap.runners.torch.worker.first_step_hook``, named by ``asap align``'s
    RunConfig): a Capture for this job when it asks for one (``capture_dir``), else None."""
    if not job.get("capture_dir"):
        return None
    scale = 1.0 / dims.dp_size / (n_micro if dims.pp > 1 else 1)
    return Capture(stage_parts, seq_len=int(job["seq_len"]), tp=dims.tp, sp=dims.sp, grad_scale=scale,
                   n_micro=n_micro)


def finish(cap: Capture, job: dict, parts, dims) -> None:
    """After the first step's backward: parameter gradients, the tp gather, one file per (dp, pp) rank."""
    cap.disarm(parts)
    info = {"dp_rank": dims.rank_in("dp"), "pp_rank": dims.rank_in("pp"), "dp": dims.dp,
            "precision": job.get("precision", "fp32")}
    path = Path(job["capture_dir"]) / f"rank{dist.get_rank()}.pt"
    tp_group = dims.tp_mesh.get_group() if dims.tp > 1 else None
    cap.save(path, tp_group, keep=dims.rank_in("tp") == 0 and dims.rank_in("cp") == 0, info=info)

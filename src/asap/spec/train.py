"""The training job: global batch (sequences), sequence length (tokens), precision."""

from __future__ import annotations

import math

from dataclasses import dataclass

import numpy as np

from asap.errors import AsapError
from asap.spec.framework import FRAMEWORK_NAMES

PRECISIONS = ("bf16", "fp16", "fp8", "fp32", "nvfp4", "mxfp4")
# block-scaled 4-bit GEMMs (Blackwell's fifth-generation tensor cores; AMD CDNA4): NVFP4 is e2m1 with an fp8
# scale per 16 elements, MXFP4 (OCP microscaling) e2m1 with an e8m0 scale per 32; both run at the catalog's fp4
# peak, with bf16 activations and higher-precision weights kept for the optimizer
FP4_PRECISIONS = ("nvfp4", "mxfp4")
LOW_PRECISIONS = ("fp8",) + FP4_PRECISIONS  # GEMMs in a quantised format, the rest of the step in bf16
TRAIN_KEYS = {"global_batch", "seq_len", "precision", "framework", "moe_imbalance", "memory_margin_gb", "allocator",
              "fused_elementwise", "compiled_loss"}
# PyTorch's CUDA caching allocator with its default segments, or with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
# (``asap.cost.allocator``); a stack that plans its memory statically (XLA) or a CPU ignores it
ALLOCATORS = ("caching", "expandable")


@dataclass(frozen=True)
class TrainSpec:
    global_batch: int
    seq_len: int
    precision: str = "bf16"
    framework: str | None = None  # the training stack (asap.spec.framework); None: the accelerator's default
    moe_imbalance: float = 1.0  # tokens on the busiest expert rank over the mean (1.0: force-balanced routing)
    # the slowest data-parallel rank's attention work over that of full-length single-document samples, per dp
    # degree: ((dp, factor), ...) from a --lengths file (asap.balance.attention_work); empty: every sample is one
    # causal document of seq_len tokens (factor 1)
    attention_work: tuple[tuple[int, float], ...] = ()
    # the mean factor over ranks of the same samples (even ranks): what balancing could reach at best
    attention_work_mean: float = 1.0
    # norms, RoPE, activations and residual adds as fused kernels (True: torch.compile, Transformer Engine) or
    # eager ones (False); None: the stack's default (asap.spec.framework.Framework.fused_elementwise)
    fused_elementwise: bool | None = None
    # torch.compile of the loss (torchtitan's ``[compile] components``); None: compiled with the kernels, as the
    # stack's default is (``Framework.compile_covers_loss``)
    compiled_loss: bool | None = None
    # device memory (GiB) kept free beyond what the stack's runtime takes (``--memory-margin``): a strategy fits
    # when its peak is at most the usable HBM less this (``asap.cost.device_memory.usable_hbm_gb``)
    memory_margin_gb: float = 0.0
    # the PyTorch stacks' allocator setting (``ALLOCATORS``); None: the stack's default (``Framework.allocator``)
    allocator: str | None = None

    def __post_init__(self):
        for key in ("global_batch", "seq_len"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise AsapError(key.replace("_", "-"), f"must be a positive integer, got {v!r}")
        if self.precision not in PRECISIONS:
            raise AsapError("precision", f"must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if not (isinstance(self.moe_imbalance, (int, float)) and 1.0 <= self.moe_imbalance <= 1e3):
            raise AsapError("moe-imbalance", f"must be a number from 1 to 1000, got {self.moe_imbalance!r}")
        m = self.memory_margin_gb
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) or not 0 <= m <= 1e4:
            raise AsapError("memory-margin", f"must be a number of GiB from 0 to 10000, got {m!r}")
        if self.framework is not None and self.framework not in FRAMEWORK_NAMES:
            raise AsapError("framework", f"must be one of {', '.join(FRAMEWORK_NAMES)}, got {self.framework!r}")
        if self.allocator is not None and self.allocator not in ALLOCATORS:
            raise AsapError("allocator", f"must be one of {', '.join(ALLOCATORS)}, got {self.allocator!r}")

    def attention_work_factor(self, dp: np.ndarray) -> np.ndarray:
        """The attention-work factor of each dp degree in ``dp`` (1 where the job has no lengths)."""
        dp = np.asarray(dp)
        out = np.ones(dp.shape, dtype=float)
        for degree, factor in self.attention_work:
            out = np.where(dp == degree, factor, out)
        return out

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    @classmethod
    def from_dict(cls, d: dict) -> "TrainSpec":
        if not isinstance(d, dict):
            raise AsapError("train", "must be a mapping")
        for key in ("global_batch", "seq_len"):
            if key not in d:
                raise AsapError(f"train.{key}", "missing")
        unknown = set(d) - TRAIN_KEYS
        if unknown:
            raise AsapError(f"train.{sorted(unknown)[0]}", f"unknown field (allowed: {', '.join(sorted(TRAIN_KEYS))})")
        framework = d.get("framework")
        imbalance = d.get("moe_imbalance", 1.0)
        if isinstance(imbalance, bool) or not isinstance(imbalance, (int, float)):
            raise AsapError("train.moe_imbalance", f"must be a number from 1 to 1000, got {imbalance!r}")
        sizes = [d[key] for key in ("global_batch", "seq_len")]
        for key, v in zip(("global_batch", "seq_len"), sizes, strict=True):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v):
                raise AsapError(f"train.{key}", f"must be a positive integer, got {v!r}")
        margin = d.get("memory_margin_gb", 0.0)
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin <= 1e4:
            raise AsapError("train.memory_margin_gb", f"must be a number of GiB from 0 to 10000, got {margin!r}")
        for key in ("fused_elementwise", "compiled_loss"):
            if d.get(key) is not None and not isinstance(d[key], bool):
                raise AsapError(f"train.{key}", f"must be true or false, got {d[key]!r}")
        return cls(int(sizes[0]), int(sizes[1]), str(d.get("precision", "bf16")),
                   None if framework is None else str(framework).lower().strip(), float(imbalance),
                   fused_elementwise=d.get("fused_elementwise"), compiled_loss=d.get("compiled_loss"),
                   memory_margin_gb=float(margin),
                   allocator=None if d.get("allocator") is None else str(d["allocator"]).lower().strip())

"""The device allocator's reserve beyond the live tensors, from the allocator's own rules and the step's largest
transient tensor (``device_memory.memory``'s allowance, less the runtime's fixed share).

PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, pytorch/pytorch at 001074d; the constants
``kSmallSize`` 1 MiB, ``kSmallBuffer`` 2 MiB, ``kMinLargeAlloc`` 10 MiB, ``kLargeBuffer`` 20 MiB, ``kRoundLarge`` 2 MiB
and ``DeviceCachingAllocator::get_allocation_size``, ``should_split``, ``get_free_block``, ``release_cached_blocks``):

- a request of at most 1 MiB comes from the small pool's 2 MiB segments; 1 to 10 MiB from a 20 MiB segment it
  splits; a larger one, when no cached free block of the stream fits it (best fit: the smallest free block at
  least as large), from a new segment of its own, ``cudaMalloc`` of the size rounded up to 2 MiB
  (``get_allocation_size`` = ``segment_bytes``);
- a free block serves a smaller request by splitting when more than 1 MiB would remain (and the request is under
  ``max_split_size``, unlimited by default); free neighbours in one segment merge, segments never do;
- on a failed ``cudaMalloc`` it frees the cached blocks that are whole segments (``release_cached_blocks``
  releases only blocks with no ``prev``/``next``) and retries.

So what a training step needs reserved beyond its allocated peak is not a share of it. Blocks of a transient freed
before the peak are reused by smaller requests or, where whole, released under pressure; what stays is a segment
*fenced*: freed, then split by a request that lives across the next request of its own size (a weight gradient
or an optimizer state allocated lazily in the first backward and step, an activation of the next micro-batch).
The next request of that size cannot fit the remainder and takes a new segment, and the fenced one cannot be
released while its piece lives. The step's largest transient tensor is the one whose remainder nothing else fills
(every other request is smaller or lives elsewhere), so the reserve is one segment of it:
    CACHING, fenced:    segment_bytes(largest transient tensor)
The fences are the tensors a stack allocates inside the step that outlive it: torch stacks free their gradients
(``zero_grad(set_to_none=True)``) and allocate them again in every backward, when the loss's buffers have just
been freed. A stack whose gradients live in a buffer allocated once (Megatron-Core's contiguous param-and-grad
buffer, ``Framework.grad_buffer_zeroed``) repeats the same shapes every step with nothing long-lived in between:
best fit finds each block again and what stays is the partly used 20 MiB segments of the 1-10 MiB requests, two
of them taken (40 MiB):
    CACHING, unfenced:  min(segment_bytes(largest), 2 x 20 MiB)
A published Megatron-LM log (GPT-345M on 4 A800, fp16, 1 x 1024 tokens, contiguous buffers, ``report_memory``
after 100 iterations: max allocated 8696.9 MB, max reserved 8786) shows 89 MB, against 40 here, 94 for a 5% share of
its 1880 MB transient, and 198 for a fenced segment of its fp32 logits (tests/cost/test_allocator.py). Where the
gradients are not in one buffer (a BERT-base log of kb-labb's LUMI-porting-Megatron-LM notes, 16 x 512 tokens,
fp16: max allocated 10595.8 MB, max reserved 12906; its gradient buffers not shown) the reserve, 2310 MB, is the
size of the loss's logits (16 x 512 x ~50k x (2 + 4) B): a fenced loss, where a 5% share gives 0.39 GB.

``expandable_segments:True`` (Note [Expandable Segments] in the same file) maps one growing segment per stream in
pages of 20 MiB (the large pool; 2 MiB the small) and on a failed allocation unmaps every free page, so a fenced
hole costs only the partly used pages at its two ends:
    EXPANDABLE:  min(segment_bytes(largest), 2 x 20 MiB)
torchtitan's ``run_train.sh`` sets it (``PYTORCH_ALLOC_CONF="expandable_segments:True"``), as does every recipe
of Megatron-Bridge's ``perf_recipes``; Megatron-LM leaves it off (its performance guide lists it as an option),
which its contiguous grad buffer makes the same figure.

XLA plans every buffer of the compiled step at compile time (buffer assignment; the program's
``memory_analysis()`` is what it holds): STATIC, 0. On a CPU the reference trainer and torchtitan allocate through
glibc's malloc, which (with the mmap threshold pinned, as ``benchmarks/memory_cpu.py`` runs them) maps each tensor
above 128 KiB on its own and unmaps it when freed: HOST, 0.
"""

from __future__ import annotations

import numpy as np

from asap.cost.roofline import act_bytes
from asap.spec.framework import Allocator
from asap.spec.model import ModelSpec
from asap.spec.train import TrainSpec

MIB = float(2**20)
SMALL_SIZE = 1 * MIB  # kSmallSize: the largest request the small pool serves
SMALL_BUFFER = 2 * MIB  # kSmallBuffer: the small pool's segment
MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc: requests from 1 MiB up to this split a kLargeBuffer segment
LARGE_BUFFER = 20 * MIB  # kLargeBuffer: that segment; also an expandable segment's page in the large pool
ROUND_LARGE = 2 * MIB  # kRoundLarge: larger requests get a segment of their size rounded up to this


def segment_bytes(request_bytes):
    """The segment the caching allocator maps for a request no cached block fits (``get_allocation_size``):
    2 MiB up to 1 MiB, 20 MiB up to 10 MiB, the request rounded up to 2 MiB above (arrays broadcast; 0 for 0)."""
    r = np.asarray(request_bytes, dtype=float)
    large = np.ceil(r / ROUND_LARGE) * ROUND_LARGE
    out = np.where(r <= SMALL_SIZE, SMALL_BUFFER, np.where(r < MIN_LARGE_ALLOC, LARGE_BUFFER, large))
    return np.where(r > 0, out, 0.0)


def reserve_bytes(allocator: Allocator, largest_transient_bytes, fenced: bool = True):
    """Bytes the allocator holds beyond the allocated peak (module docstring): under the caching allocator one
    fenced segment of the step's largest transient tensor where the stack allocates long-lived tensors inside the
    step (``fenced``: gradients freed by ``zero_grad(set_to_none=True)`` and allocated again in each backward),
    else, and with expandable segments, at most the two partly used 20 MiB segments or pages around a hole;
    nothing under a static plan or host malloc."""
    seg = segment_bytes(largest_transient_bytes)
    if allocator == Allocator.CACHING and fenced:
        return seg
    if allocator in (Allocator.CACHING, Allocator.EXPANDABLE):
        return np.minimum(seg, 2 * LARGE_BUFFER)
    return np.zeros_like(seg)


def allocator_on(framework_allocator: Allocator, family: str, stated: str | None = None) -> Allocator:
    """The allocator a stack runs on an accelerator family: host malloc on a CPU; on a device the stack's own, or
    where the job states one (``TrainSpec.allocator``: caching or expandable) and the stack allocates through
    PyTorch's caching allocator, that one."""
    if family == "cpu":
        return Allocator.HOST
    torch_allocators = (Allocator.CACHING, Allocator.EXPANDABLE)
    if stated is not None and framework_allocator in torch_allocators:
        return Allocator(stated)
    return framework_allocator


def logits_tensor_bytes(mbs, seq_len: int, cp, vocab_size: int, tp, vocab_tiles, loss_parallel: bool):
    """The loss's largest single tensor, the fp32 copy of one micro-batch's logits (Megatron-Core's
    vocab_parallel_cross_entropy ``.float()``, torchtitan's ``pred.float()``; the same shape is the fp32 gradient
    the backward writes): T V / tp x 4 B per rank with T = mbs x seq / cp tokens, V / tp the vocabulary shard
    (the whole vocabulary where the loss is not vocabulary-parallel), one tile of ``vocab_tiles``."""
    shard = np.where(loss_parallel, np.asarray(tp, dtype=float), 1.0)
    return 4.0 * np.asarray(mbs) * seq_len / np.asarray(cp) * vocab_size / shard / np.asarray(vocab_tiles)


def layer_tensor_bytes(model: ModelSpec, train: TrainSpec, S):
    """[N] one layer's largest activation tensor on a rank, allocated in its forward (or its recompute) and
    freed in its backward: the first MLP GEMM's output, T x (2 ffn | ffn) / tp x the activation bytes (the gated
    MLP's gate and up projections as one fused GEMM, Megatron-Core's linear_fc1), and in an MoE layer the larger of
    the routed tokens' expert GEMM output, T x top_k x (2 | 1) expert_ffn / etp, and the dispatched tokens'
    hidden states, T x top_k x hidden (the token permutation's output and the all-to-all's receive buffer: each
    rank of ep receives T x top_k token copies when routing is balanced; the larger where hidden > 2 expert_ffn,
    as in DeepSeek-V3's 7168 against 2 x 2048); T = mbs x seq / cp tokens."""
    tokens = np.asarray(S.mbs) * train.seq_len / np.asarray(S.cp)
    width = 2.0 if model.gated else 1.0
    dense = tokens * width * model.ffn_hidden_size / np.asarray(S.tp)
    if model.moe is not None:
        moe = model.moe
        routed = tokens * moe.top_k * np.maximum(width * moe.expert_ffn_hidden_size / np.asarray(S.etp),
                                                 model.hidden_size)
        dense = np.maximum(dense if model.num_dense_layers else 0.0, routed)
    return dense * act_bytes(train.precision)

"""DeepEP's communication buffers: device memory the dedup dispatcher holds outside PyTorch's allocator.

A stack that dispatches MoE tokens with DeepEP (``Dispatcher.DEDUP``: Megatron-Core's flex dispatcher,
``_DeepepManager`` in megatron/core/transformer/moe/fused_a2a.py; torchtitan's ``expert_parallel_comm_backend =
"deepep"``) builds one ``deep_ep.Buffer`` for its expert group as DeepEP's README does (``get_buffer``): for both
the dispatch and the combine config of the group's size (``Buffer.get_dispatch_config`` /
``get_combine_config``, deep_ep/buffer.py), the larger of each config's size hints, with ``hidden_bytes`` =
hidden x max(element size, 2) (fp8 dispatch too: ``get_hidden_bytes``). The hints (csrc/config.hpp,
``Config::get_nvl_buffer_size_hint`` / ``get_rdma_buffer_size_hint``), with ``num_sms`` = 20 (``Buffer.num_sms``,
Megatron-Core's ``moe_deepep_num_sms`` default), so 10 channels:

    NVLink buffer (cudaMalloc, every group):
        channels x nvl_ranks x [(2 rdma_ranks + 3) x 4 + nvl_recv x (hidden_bytes + 8 + 128 x 8 + 128 x 4 + 128 x 4)]
    RDMA buffer (NVSHMEM's symmetric heap, only where the group spans nodes: more than 8 ranks):
        channels x rdma_ranks x [(8 x 2 + 2) x 2 x 4 + 2 rdma_recv x (hidden_bytes + 8 + 128 x 8 + 128 x 4
        + 128 x 4 + 16)] + 1 MiB

with nvl_ranks = min(ranks, 8), rdma_ranks = max(ranks / 8, 1), 8 B of source metadata per token, room for 128
top-k indices (int64) and weights (fp32) and 128 fp8 scales per token, and ``rdma_recv`` rounded up to a
multiple of the RDMA send chunk. NVSHMEM backs its heap in ``NVSHMEM_CUMEM_GRANULARITY`` pieces, which
``Buffer.__init__`` sets to 512 MiB, so the RDMA buffer holds whole 512 MiB pieces of device memory. The buffer
also allocates a 32 MiB workspace (``NUM_WORKSPACE_BYTES``). Megatron-Core's group is the expert tensor- and
expert-parallel group (``tp_ep_group``: etp x ep ranks). A group size DeepEP has no config for (it asserts
"Unsupported number of EP ranks") is priced at the next size it has (the largest above 160).

E.g. DeepSeek-V3 (hidden 7168) on ep 64: NVL 10 x 8 x 288 x 16,392 B = 360 MiB, RDMA 10 x 8 x 140 x 2 x
16,408 B + 1 MiB = 352 MiB held as 512 MiB, with the workspace 904 MiB; on ep 8 (one node): NVL 10 x 8 x 256 x
16,392 B = 320 MiB, no RDMA buffer, 352 MiB with the workspace.
"""

from __future__ import annotations

import numpy as np

from asap.spec.framework import Dispatcher

NVL_PEERS = 8  # NUM_MAX_NVL_PEERS
CHANNELS = 20 // 2  # Buffer.num_sms / 2
MAX_TOPK = 128  # kNumMaxTopK
MAX_SCALES = 128  # kNumMaxScales
SOURCE_META_BYTES = 8  # internode::SourceMeta: two ints
WORKSPACE_BYTES = 32 * 2**20  # NUM_WORKSPACE_BYTES
NVSHMEM_GRANULARITY_BYTES = 2**29  # NVSHMEM_CUMEM_GRANULARITY as Buffer.__init__ sets it
RDMA_SLACK_BYTES = 2**20  # "add a large number to be safe"
# what each received token carries beside its hidden state: the source metadata, top-k indices (int64) and
# weights (fp32), fp8 scales (fp32); the RDMA buffer's tokens add a 16 B int4 of their own
TOKEN_EXTRA_BYTES = SOURCE_META_BYTES + MAX_TOPK * 8 + MAX_TOPK * 4 + MAX_SCALES * 4
# (nvl_recv, rdma_send, rdma_recv) of Buffer.get_dispatch_config / get_combine_config by group size (the
# nvl_send chunk does not size a buffer)
DISPATCH_CONFIG = {2: (256, 6, 128), 4: (256, 6, 128), 8: (256, 6, 128), 16: (288, 20, 128), 24: (288, 32, 128),
                   32: (288, 32, 128), 64: (288, 28, 128), 128: (560, 32, 128), 144: (720, 12, 128),
                   160: (720, 12, 128)}
COMBINE_CONFIG = {2: (256, 6, 128), 4: (256, 6, 128), 8: (256, 6, 128), 16: (288, 28, 128), 24: (288, 20, 128),
                  32: (288, 20, 128), 64: (288, 20, 128), 128: (560, 12, 128), 144: (720, 8, 128),
                  160: (720, 8, 128)}
# the device families DeepEP's kernels run on (NVIDIA's, and AMD's through Primus-Turbo's port)
DEEPEP_FAMILIES = ("ampere", "hopper", "blackwell", "cdna3", "cdna4")


def _align(x, to):
    return -(-x // to) * to


def _config_size(ranks: int) -> int:
    """The group size whose config DeepEP uses: ``ranks``, else the next one it has."""
    return next((n for n in sorted(DISPATCH_CONFIG) if n >= ranks), max(DISPATCH_CONFIG))


def nvl_buffer_bytes(hidden_bytes: int, ranks: int, nvl_recv: int) -> int:
    nvl, rdma = min(ranks, NVL_PEERS), max(ranks // NVL_PEERS, 1)
    return _align(CHANNELS * nvl * ((2 * rdma + 3) * 4 + nvl_recv * (hidden_bytes + TOKEN_EXTRA_BYTES)), 128)


def rdma_buffer_bytes(hidden_bytes: int, ranks: int, rdma_send: int, rdma_recv: int) -> int:
    if ranks <= NVL_PEERS:
        return 0
    rdma, recv = ranks // NVL_PEERS, _align(rdma_recv, rdma_send)
    per_token = hidden_bytes + TOKEN_EXTRA_BYTES + 16
    return _align(CHANNELS * rdma * ((NVL_PEERS * 2 + 2) * 2 * 4 + 2 * recv * per_token) + RDMA_SLACK_BYTES, 128)


def deepep_buffer_bytes(hidden: int, ranks: int) -> int:
    """Device bytes of one DeepEP ``Buffer`` for a group of ``ranks`` (the module docstring): the NVLink buffer,
    the RDMA buffer in whole NVSHMEM pieces, the workspace; 0 for a group of one."""
    if ranks <= 1:
        return 0
    hidden_bytes, size = hidden * 2, _config_size(ranks)
    configs = (DISPATCH_CONFIG[size], COMBINE_CONFIG[size])
    nvl = max(nvl_buffer_bytes(hidden_bytes, ranks, c[0]) for c in configs)
    rdma = max(rdma_buffer_bytes(hidden_bytes, ranks, c[1], c[2]) for c in configs)
    return nvl + _align(rdma, NVSHMEM_GRANULARITY_BYTES) + WORKSPACE_BYTES


def ep_comm_buffer_bytes(model, family: str, S) -> np.ndarray:
    """[N] DeepEP's buffers on the rows that dispatch with it (an MoE model, ``dispatcher=dedup``, an expert
    group of more than one rank: etp x ep), on the families it runs on; 0 elsewhere."""
    dedup = np.asarray(S.dispatcher) == Dispatcher.DEDUP.code
    if model.moe is None or family not in DEEPEP_FAMILIES or not dedup.any():
        return np.zeros(np.shape(dedup), dtype=float)
    ranks = np.broadcast_to(np.asarray(S.ep) * np.asarray(S.etp), np.shape(dedup)).astype(np.int64)
    table = np.zeros(int(ranks.max()) + 1)  # bytes by group size, for the sizes present
    for n in np.flatnonzero(np.bincount(ranks.ravel())):
        table[n] = deepep_buffer_bytes(model.hidden_size, int(n))
    return np.where(dedup, table[ranks], 0.0)

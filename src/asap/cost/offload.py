"""Host offload: what moving stored activations or optimizer states to host memory costs and saves.

Two strategy keys (``asap.spec.strategy``), each as its stacks document it:

- ``offload_act=1``: every layer's stored activations are copied to host memory after its forward and back
  before its backward, on a side stream (Megatron-Core ``--cpu-offloading`` with Transformer Engine's CPU
  offload context; MaxText's offloading ``remat_policy`` variants, e.g. ``save_and_offload_only_these_names``;
  DeepSpeed ``cpu_checkpointing``). The device then holds about ``OFFLOAD_WINDOW_LAYERS`` layers' activations of
  one micro-batch (the layer computing and the one in transit) instead of all of its layers' for every
  micro-batch in flight. Per unit and micro-batch the copy of its stored bytes B runs beside the unit's own
  computation: forward D2H and backward H2D, each exposed where it outlasts that pass,
      offload_u = max(0, B / link - fwd_u) + max(0, B / link - bwd_u)        (priced in the unit's host part)
- ``offload_opt=1``: the fp32 master weights and Adam moments stay in host memory and the CPU steps them
  (Megatron-Core ``--optimizer-cpu-offload``, its HybridDeviceOptimizer, with
  ``--overlap-cpu-optimizer-d2h-h2d``; DeepSpeed ZeRO-Offload; torchtitan's FSDP2 ``CPUOffloadPolicy``; MaxText
  ``optimizer_memory_host_offload``). Per step, for the device's optimizer shard of P parameters: the fp32
  gradients go down (4 B) and the updated bf16 weights come up (2 B) over the host link, overlapped bucket by
  bucket with the CPU's Adam, which streams ``ADAM_BYTES_PER_PARAM`` per parameter through host memory:
      optimizer = max(6 P / link, 32 P / host_memory)

``link`` is the device's host link (``Accelerator.host_link_gbps`` per direction: PCIe Gen4/Gen5 x16, or NVLink-C2C
on Grace superchips, 450 GB/s per direction on GH200) at ``HOST_LINK_EFFICIENCY`` (DMA over PCIe reaches about 80%
of the link); ``host_memory`` the device's share of its host's DRAM bandwidth (``Accelerator.host_mem_gbps``).
``offload_layers`` = n > 0 offloads n of a device's layers only (Megatron-Core ``cpu_offloading_num_layers``;
Megatron-Bridge recipes offload some layers, not all): the others keep their activations on the device, and
only the n layers' bytes cross the link. What offload keeps in host memory is checked against the device's
share of its host's DRAM (``Accelerator.host_mem_capacity_gb`` at ``asap.cost.device_memory.HOST_MEM_USABLE``): a DGX
host has 2 TB for 8 GPUs, a Grace 480 GB for two Blackwells, a TPU v6e host 1536 GiB for 8 chips.
"""

from __future__ import annotations

import numpy as np

from asap.spec.hardware import Accelerator

OFFLOAD_WINDOW_LAYERS = 2.0  # the layer computing and the one whose activations are in transit
HOST_LINK_EFFICIENCY = 0.8  # DMA over PCIe (and C2C) reaches about 80% of the link's peak
GRAD_DOWN_BYTES, WEIGHT_UP_BYTES = 4.0, 2.0  # fp32 gradients to the host, bf16 weights back
CPU_ADAM_BYTES_PER_PARAM = 32.0  # the same Adam traffic as on the device (cost.step_fixed.ADAM_BYTES_PER_PARAM)


def host_link_bytes_per_s(acc: Accelerator) -> float:
    return acc.host_link_gbps * 1e9 * HOST_LINK_EFFICIENCY


def activation_offload_s(acc: Accelerator, stored_bytes, fwd_s, bwd_s):
    """Exposed seconds of a unit's activation copies per micro-batch (arrays broadcast)."""
    copy = np.asarray(stored_bytes, dtype=float) / host_link_bytes_per_s(acc)
    return np.maximum(0.0, copy - fwd_s) + np.maximum(0.0, copy - bwd_s)


def offloaded_optimizer_s(acc: Accelerator, params_stepped):
    """Seconds per step of the host-side optimizer over ``params_stepped`` parameters (the device's shard)."""
    p = np.asarray(params_stepped, dtype=float)
    link = (GRAD_DOWN_BYTES + WEIGHT_UP_BYTES) * p / host_link_bytes_per_s(acc)
    cpu = CPU_ADAM_BYTES_PER_PARAM * p / (acc.host_mem_gbps * 1e9)
    return np.maximum(link, cpu)


def offloaded_share(offload_layers, layers):
    """The share of a device's layers that offload their activations: ``offload_layers`` of its ``layers``
    (Megatron-Core ``cpu_offloading_num_layers``), every one for 0 (arrays broadcast)."""
    n, layers = np.asarray(offload_layers, dtype=float), np.maximum(np.asarray(layers, dtype=float), 1.0)
    return np.where(n > 0, np.minimum(n, layers) / layers, 1.0)


def offloaded_activations(kept_bytes, layers, in_flight_kept, offload_layers=0):
    """Stored activations on the device under activation offload: the layers that do not offload keep theirs
    for every micro-batch in flight (``in_flight_kept``: all its layers'), the offloading ones
    ``OFFLOAD_WINDOW_LAYERS`` layers' worth of one micro-batch (``kept_bytes``: all its layers', one
    micro-batch); never more than without offload."""
    share = offloaded_share(offload_layers, layers)
    window = np.asarray(kept_bytes, dtype=float) * OFFLOAD_WINDOW_LAYERS / np.maximum(layers, 1.0)
    offloaded = share * np.asarray(in_flight_kept, dtype=float)
    return in_flight_kept - offloaded + np.minimum(window, offloaded)

"""Calibrate a cluster file from short real runs on this machine (``asap calibrate``).

``calibrate(cluster, devices=None, out=path)`` starts ``P`` worker processes (one per device: gloo on CPU,
NCCL on CUDA GPUs) that, all at once as in a real run, time

- GEMMs ``torch.matmul`` over a grid of (m, n, k) like the ones strategies produce (fp32 on CPU, bf16 on CUDA),
- a streaming elementwise kernel (``torch.add`` of large tensors) and a copy: memory bandwidth,
- tiny operators (a 1-element ``add``; a small Linear forward + backward under autograd): host overhead per
  operator,
- ``all_reduce`` and ``all_gather`` over group sizes 2, 4, ... P and messages of 4 KiB to 16 MiB (256 MiB on
  GPUs),

each after a warm-up, as the median over repeats of a timed loop; every figure keeps its fastest and slowest
repeat (over all ranks) as its spread. The cost model's constants are then fitted *through the cost model's
own formulas* (``asap.cost.roofline``, ``asap.cost.collectives``): the values that make them reproduce the
measured times best (least squares of log time), and the fit repeated on the fastest and on the slowest
repeat of every point gives each constant's noise band. The result is a cluster file (YAML or JSON by the
extension of ``out``) that every ``--cluster`` option reads, carrying the measurements, the date, the versions
and the machine in its ``measured`` block (``asap.spec.calibration_file.validate_measured``).

A device on CPU is one process with ``cpu_count // P`` threads (at least one), as ``asap run`` starts them, all
P of them busy at once: the per-device figures are what a P-process run on this machine gets.

Mapping to the cost model (docs/calibrate.md): vendor peaks stay the peaks and the efficiencies absorb the
measurement (``gemm_efficiency = achieved asymptote / peak``, ``hbm_efficiency``, ``net_efficiency = bus
bandwidth / intra_node_gbps``); where this machine beats its nominal figure the peak is raised to the measured
one and the efficiency written as 1. ``collective_latency_s``, ``hop_latency_s`` (held at the family's figure
when only one group size is measured), ``gemm_half_dim`` and ``kernel_overhead_s`` are written as fitted.

The package's rooms, in the order they import each other: ``measure`` (the torch worker: run as ``python -m
asap.calibrate --worker CONFIG RANK`` it is one worker; it imports only the standard library at the top, so that
a worker starts fast), ``fit`` (the constants through the cost model's formulas), ``document`` (the cluster file)
and ``orchestrate`` (the driver: inputs, worker processes, progress, failures). Their public names are
importable from ``asap.calibrate``.
"""

from asap.calibrate.document import (CALIBRATION_FORMAT, NOT_MEASURED, build_cluster_document,  # noqa: F401
                                     write_cluster_file)
from asap.calibrate.fit import Fits, fit_constants, per_call_s, predict_collective_s  # noqa: F401
from asap.calibrate.measure import COLL_MIN_CALLS, HOST_BLOCKS, KIB, MIB, block_spec  # noqa: F401
from asap.calibrate.orchestrate import (DEFAULT_TIMEOUT_S, PLANS, CalibrationFailed, calibrate,  # noqa: F401
                                        check_inputs, find_machine_calibration, group_sizes,
                                        machine_calibration_path)

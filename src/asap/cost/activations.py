"""Stored activation bytes of one transformer layer for one micro-batch on one device, from the layer's
operation table (``asap.cost.layer_ops``: each operation's saved tensors and the recompute modules that drop
them).

The accounting (Korthikanti et al. 2022 and what each recompute policy keeps) is ``asap.cost.device_memory``'s module
docstring; ``asap.cost.units`` prices every unit with these figures and ``asap.cost.device_memory`` adds the in-flight
micro-batches and the model states. A module of its own so that both read it and neither imports the other's
reader (units -> activations <- memory -> units).
"""

from __future__ import annotations

from asap.cost.batch import StrategyBatch
from asap.cost.layer_ops import Shapes, layer_table
from asap.cost.operations import OperationTable
from asap.spec.layout import Unit
from asap.spec.model import ModelSpec
from asap.spec.train import TrainSpec

LAYER_UNITS = (Unit.DENSE, Unit.MOE, Unit.MTP)  # the units that are transformer blocks


def layer_saves(model: ModelSpec, train: TrainSpec, S: StrategyBatch, moe: bool,
                sp_gathered_input: bool = False, unfused: float = 1.0) -> OperationTable:
    """One layer's operation table for its stored tensors (an MoE layer's when ``moe``; ``sp_gathered_input``:
    the stack's GEMMs save their all-gathered input under sequence parallelism, ``Shapes.norm_output``;
    ``unfused``: the stack's elementwise traffic, above 1 where its kernels are eager and save more)."""
    return layer_table(model, Shapes.of(model, train, S, unfused, sp_gathered_input=sp_gathered_input), S, moe=moe)


def activation_bytes_per_layer(model: ModelSpec, train: TrainSpec, S: StrategyBatch, moe: bool, selective=False):
    """Stored activation bytes of one layer for one micro-batch on one device, without recompute, or under
    selective recompute (the norm outputs and the activation functions' outputs are recomputed)."""
    return layer_saves(model, train, S, moe).stored_bytes(selective)


def module_kept_bytes(model: ModelSpec, train: TrainSpec, S: StrategyBatch, moe: bool):
    """Per row: what a layer stores when its recompute value is a module set (the other rows: everything)."""
    return layer_saves(model, train, S, moe).module_kept_bytes(S.recompute)

"""What one transformer block of the reference trainer saves for its backward, against the bytes asap prices for it.

    PYTHONPATH=src .venv/bin/python benchmarks/saved_activations_cpu.py [--seq 2048] [--precision fp32]

Builds the reference trainer's model (``asap.runners.torch.model``, the 68M-parameter dense model of
benchmarks/memory_cpu.py: 4 layers, h 1024, ffn 2816, 8 heads) and runs one block's forward on one sequence under
``torch.autograd.graph.saved_tensors_hooks``, counting every distinct storage autograd saves (a view counts its
storage once), less the parameters (saved by the linears for the input gradient, not activations) and the RoPE
table; the block's input counts (its norm saves it, as the cost model's table has it). Prints the saved tensors by
shape, their sum per token in units of h elements, and ``asap.cost.activations.layer_saves``'s figure for the same
layer under the reference trainer's eager kernels (tp 1: what the cost model stores per layer and micro-batch,
``Framework.sp_gathered_input``, ``Framework.elementwise_traffic``).

On this project's 2-core CPU machine (torch 2.13, fp32, seq 2048): 21.0 h saved per token. The cost model priced
16.25 h, a fused stack's layer; it now prices 19.0 h: eager SwiGLU (silu(w1 x) * (w3 x)) saves four ffn-wide
tensors (w1's output for silu, silu's output and w3's output for the product, the product for w2), one more than
a fused kernel's three (``layer_ops.mlp_ops``), as torchtitan's FeedForward does on a GPU. The 2 h left are this
CPU's composite RMSNorm (pow, mean, rsqrt and two muls: it saves x * rstd beside its input and output, 3 h a
norm where a fused kernel, and torch's CUDA ``_fused_rms_norm``, keep the input and a row's rstd): a CPU-only
term, not priced.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path



def saved_storages(block, x, rope):
    """{storage pointer: (bytes, shape, dtype)} of what ``block``'s forward saves for its backward."""
    import torch

    seen: dict[int, tuple[int, tuple, object]] = {}

    def pack(t):
        st = t.untyped_storage()
        size = max(seen.get(st.data_ptr(), (0,))[0], st.nbytes())
        seen[st.data_ptr()] = (size, tuple(t.shape), t.dtype)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x, rope)
    return seen


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    a = ap.parse_args(argv)
    import numpy as np
    import torch

    from asap.cost.activations import layer_saves
    from asap.runners.torch.model import build_model
    from asap.spec.batch import StrategyBatch
    from asap.spec.framework import FRAMEWORKS
    from asap.spec.loader import load_model
    from asap.spec.strategy import complete_strategy
    from asap.spec.train import TrainSpec

    sys.path.insert(0, str(Path(__file__).parent))
    from memory_cpu import MODEL as MODEL_YAML  # the 68M-parameter model that benchmark runs

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "mid.yaml"
        path.write_text(MODEL_YAML)
        spec = load_model(str(path))
    dtype = torch.float32 if a.precision == "fp32" else torch.bfloat16
    model = build_model(spec, a.seq, 0).to(dtype)
    block = model.layers["0"]
    x = torch.randn(1, a.seq, spec.hidden_size, dtype=dtype, requires_grad=True)
    skip = {p.untyped_storage().data_ptr() for p in model.parameters()}
    skip |= {model.rope.untyped_storage().data_ptr()}
    seen = {k: v for k, v in saved_storages(block, x, model.rope).items() if k not in skip}
    per_h = a.seq * spec.hidden_size * x.element_size()
    for size, shape, dt in sorted(seen.values(), key=lambda v: -v[0]):
        print(f"  {size / per_h:6.3f} h  {shape} {dt}")
    measured = sum(v[0] for v in seen.values()) / per_h
    train = TrainSpec(global_batch=1, seq_len=a.seq, precision=a.precision, framework="asap")
    s = complete_strategy({"mbs": 1}, 1, framework=FRAMEWORKS["asap"])
    S = StrategyBatch.from_strategies([s])
    fw = FRAMEWORKS["asap"]
    priced = float(np.asarray(layer_saves(spec, train, S, moe=False, sp_gathered_input=fw.sp_gathered_input,
                                          unfused=fw.elementwise_traffic_for(None)).stored_bytes(False))[0])
    print(f"saved per layer: {measured:.2f} h per token ({measured * per_h / 2**20:.1f} MiB at seq {a.seq}); "
          f"asap prices {priced / per_h:.2f} h ({priced / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

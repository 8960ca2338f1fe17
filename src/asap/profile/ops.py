"""FLOPs and bytes of one operator call, from the shapes the profiler recorded (``record_shapes=True``).

The counts are the textbook ones: a matrix product of (m x k) by (k x n) is 2mkn FLOPs and moves its two
inputs and its output once; attention is two such products per head; a convolution is a matrix product per
output pixel; an elementwise op touches every element of its operands once. Bytes are the minimum traffic
(each operand read once, the result written once) -- what a perfect cache would leave, so the arithmetic
intensity here is an upper bound, as on any roofline.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

DTYPE_BYTES = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "half": 2, "bfloat16": 2, "float16": 2,
    "float32": 4, "float64": 8, "int": 4, "long int": 8, "long": 8, "short int": 2, "signed char": 1,
    "unsigned char": 1, "bool": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1, "c10::complex<float>": 8, "int8": 1, "uint8": 1,
    # record_param_comms spells dtypes as torch.dtype names
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Byte": 1, "Char": 1, "Bool": 1,
    "Float8_e4m3fn": 1, "Float8_e5m2": 1,
}
DTYPE_PRECISION = {
    "float": "fp32", "float32": "fp32", "Float": "fp32", "double": "fp32", "Double": "fp32",
    "c10::Half": "fp16", "half": "fp16", "float16": "fp16", "Half": "fp16",
    "c10::BFloat16": "bf16", "bfloat16": "bf16", "BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8", "Float8_e4m3fn": "fp8", "Float8_e5m2": "fp8",
}

# FLOPs per output element of elementwise-like ops (1 unless the math is heavier); the rest count 1
_ELEMENTWISE_FLOPS = {
    "gelu": 8, "gelu_backward": 10, "silu": 4, "silu_backward": 6, "sigmoid": 4, "tanh": 4, "exp": 4,
    "log": 4, "softmax": 5, "_softmax": 5, "_softmax_backward_data": 4, "log_softmax": 5,
    "_log_softmax": 5, "layer_norm": 8, "native_layer_norm": 8, "native_layer_norm_backward": 12,
    "rms_norm": 6, "_fused_rms_norm": 6, "pow": 2, "rsqrt": 2, "sqrt": 2, "div": 1, "erf": 4,
    "native_batch_norm": 8, "cudnn_batch_norm": 8, "cudnn_batch_norm_backward": 12,
    "native_batch_norm_backward": 12, "_fused_adam": 12, "_fused_adamw": 12, "_foreach_add": 1,
    "_foreach_mul": 1, "_foreach_addcmul": 2, "_foreach_addcdiv": 2, "_foreach_lerp": 3, "_foreach_sqrt": 2,
}
_ELEMENTWISE = {
    "add", "sub", "mul", "div", "neg", "abs", "relu", "threshold", "threshold_backward", "clamp", "clamp_min",
    "clamp_max", "where", "fill", "copy", "zero", "masked_fill", "gelu", "gelu_backward", "silu",
    "silu_backward", "sigmoid", "sigmoid_backward", "tanh", "tanh_backward", "exp", "log", "pow", "rsqrt",
    "sqrt", "erf", "dropout", "native_dropout", "native_dropout_backward", "softmax", "_softmax",
    "_softmax_backward_data", "log_softmax", "_log_softmax", "_log_softmax_backward_data", "layer_norm",
    "native_layer_norm", "native_layer_norm_backward", "rms_norm", "_fused_rms_norm", "addcmul", "addcdiv",
    "lerp", "mse_loss", "mse_loss_backward", "sum", "mean", "_to_copy", "to", "cat", "clone", "contiguous",
    "native_batch_norm", "native_batch_norm_backward", "cudnn_batch_norm", "cudnn_batch_norm_backward",
    "_fused_adam", "_fused_adamw", "_foreach_add", "_foreach_mul", "_foreach_addcmul", "_foreach_addcdiv",
    "_foreach_lerp", "_foreach_sqrt", "_foreach_div", "_foreach_copy", "_foreach_zero", "embedding",
    "embedding_dense_backward", "index_select", "gather", "scatter", "scatter_add", "nll_loss_forward",
    "nll_loss_backward", "cross_entropy_loss", "max", "min", "argmax", "amax", "norm", "linalg_vector_norm",
    "add_", "mul_", "copy_", "fill_", "zero_",
}
_VIEWS = {
    "view", "reshape", "_reshape_alias", "t", "transpose", "permute", "expand", "as_strided", "slice",
    "select", "unsqueeze", "squeeze", "detach", "alias", "empty", "empty_strided", "empty_like", "unflatten",
    "flatten", "split", "chunk", "narrow", "unbind", "_unsafe_view", "lift_fresh", "resolve_conj",
    "resolve_neg", "result_type", "numpy_T", "matrix_H", "split_with_sizes", "view_as", "expand_as",
}
def _numel(shape: Any) -> int:
    try:
        return int(math.prod(shape))
    except TypeError:  # not a flat list of numbers (a TensorList, a scalar slot)
        return 0


def _tensors(dims: list, types: list) -> list[tuple[list, int]]:
    """(shape, element bytes) of each tensor argument; scalars, lists of tensors and empty slots dropped."""
    out = []
    for i, shape in enumerate(dims):
        t = types[i] if i < len(types) else ""
        size = DTYPE_BYTES.get(t)
        if size is None or not isinstance(shape, list) or not shape or isinstance(shape[0], list):
            continue
        out.append((shape, size))
    return out


def precision_of(types: list) -> str | None:
    for t in types or []:
        p = DTYPE_PRECISION.get(t)
        if p:
            return p
    return None


def op_cost(name: str, args: dict) -> tuple[float | None, float | None, str | None]:
    """(FLOPs, bytes, precision) of one call from its recorded shapes; (None, None, None) without shapes."""
    dims = args.get("Input Dims")
    if not isinstance(dims, list):
        return None, None, None
    types = args.get("Input type") or []
    if not isinstance(types, list):
        types = []
    tensors = _tensors(dims, types)
    precision = precision_of(types)
    base = name.split("::", 1)[-1]
    try:
        cost = _matrix_cost(base, tensors)
        if cost is None:
            cost = _attention_cost(base, tensors, _is_causal(args))
        if cost is None:
            cost = _conv_cost(base, tensors, args)
        if cost is None:
            cost = _elementwise_cost(base, tensors)
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return None, None, precision
    if cost is None:
        return None, None, precision
    return float(cost[0]), float(cost[1]), precision


def _matrix_cost(base: str, tensors: list) -> tuple[float, float] | None:
    """mm / addmm / bmm / baddbmm / matmul / linear: 2 * batch * m * k * n."""
    if base in ("mm", "_scaled_mm") and len(tensors) >= 2:
        (a, sa), (b, sb) = tensors[0], tensors[1]
        m, k, n = a[-2], a[-1], b[-1]
        return 2 * m * k * n, (m * k) * sa + (k * n) * sb + (m * n) * sa
    if base == "addmm" and len(tensors) >= 3:
        (c, sc), (a, sa), (b, sb) = tensors[0], tensors[1], tensors[2]
        m, k, n = a[-2], a[-1], b[-1]
        return 2 * m * k * n + m * n, _numel(c) * sc + (m * k) * sa + (k * n) * sb + (m * n) * sa
    if base == "bmm" and len(tensors) >= 2:
        (a, sa), (b, sb) = tensors[0], tensors[1]
        bt, m, k, n = a[0], a[1], a[2], b[2]
        return 2 * bt * m * k * n, bt * (m * k * sa + k * n * sb + m * n * sa)
    if base == "baddbmm" and len(tensors) >= 3:
        (c, sc), (a, sa), (b, sb) = tensors[0], tensors[1], tensors[2]
        bt, m, k, n = a[0], a[1], a[2], b[2]
        return 2 * bt * m * k * n + bt * m * n, _numel(c) * sc + bt * (m * k * sa + k * n * sb + m * n * sa)
    if base == "matmul" and len(tensors) >= 2:
        (a, sa), (b, sb) = tensors[0], tensors[1]
        a2 = a if len(a) >= 2 else [1] + list(a)
        b2 = b if len(b) >= 2 else list(b) + [1]
        m, k, n = a2[-2], a2[-1], b2[-1]
        batch = max(_numel(a2[:-2]), _numel(b2[:-2]), 1)
        return 2 * batch * m * k * n, _numel(a) * sa + _numel(b) * sb + batch * m * n * sa
    if base == "linear" and len(tensors) >= 2:
        (x, sx), (w, sw) = tensors[0], tensors[1]
        rows = _numel(x[:-1]) if len(x) > 1 else 1
        k, n = x[-1], w[0]
        bias = _numel(tensors[2][0]) * tensors[2][1] if len(tensors) > 2 else 0
        return 2 * rows * k * n, _numel(x) * sx + _numel(w) * sw + bias + rows * n * sx
    return None


_ATTN_FWD = ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
             "_flash_attention_forward", "_efficient_attention_forward", "_cudnn_attention_forward",
             "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math",
             "_flash_attention", "_efficient_attention", "_cudnn_attention")


def _is_causal(args: dict) -> bool:
    """is_causal of an attention call: in every SDPA variant it is the first boolean after dropout_p (the
    first float among the recorded concrete inputs)."""
    concrete = args.get("Concrete Inputs") or []
    seen_float = False
    for c in concrete:
        if not isinstance(c, str):
            continue
        if not seen_float:
            with contextlib.suppress(ValueError):  # not a number: keep looking
                seen_float = "." in c and float(c) >= 0
        elif c in ("True", "False"):
            return c == "True"
    return False


def _attention_cost(base: str, tensors: list, causal: bool = False) -> tuple[float, float] | None:
    """Attention over q (B, H, L, E), k (B, H, S, E), v (B, H, S, Ev): QK^T and PV are 2*B*H*L*S*(E+Ev).

    The backward pass recomputes QK^T and forms dQ, dK, dV, dP: 2.5x the forward products (the
    FlashAttention-2 paper's count). A causal mask skips about half the score matrix (L = S): half the FLOPs.
    """
    backward = base.endswith("_backward")
    fwd = base[: -len("_backward")] if backward else base
    if fwd not in _ATTN_FWD:
        return None
    qkv = [t for t in tensors if len(t[0]) == 4]
    if backward:  # grad_out, q, k, v, out, ...: q, k, v are the 2nd to 4th 4-d tensors
        qkv = qkv[1:4]
    if len(qkv) < 3:
        return None
    (q, s), (k, _), (v, _) = qkv[:3]
    b, h, lq, e = q
    lk, ev = k[2], v[3]
    flops = 2.0 * b * h * lq * lk * (e + ev) * (0.5 if causal else 1.0)
    io = (_numel(q) + _numel(k) + _numel(v) + b * h * lq * ev) * s  # q, k, v read, out written
    if backward:
        return 2.5 * flops, 2.0 * io + b * h * lq * ev * s  # + grad_out read, grads written
    return flops, io


def _conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    return max((size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1, 1)


# backend convolutions take (padding, stride, dilation); the generic ones (stride, padding, dilation)
_PADDING_FIRST = ("mkldnn_convolution", "cudnn_convolution", "miopen_convolution")


def _conv_params(base: str, args: dict, spatial: int) -> tuple[list[int], list[int], list[int]]:
    """stride, padding, dilation from the recorded concrete inputs ('[2, 2]' strings), else 1, 0, 1."""
    concrete = args.get("Concrete Inputs") or []
    found = []
    for c in concrete[2:]:
        if isinstance(c, str) and c.startswith("["):
            try:
                vals = [int(x) for x in c.strip("[]").split(",") if x.strip()]
            except ValueError:
                continue
            found.append(vals if len(vals) == spatial else [vals[0]] * spatial if vals else [1] * spatial)
    if base in _PADDING_FIRST and len(found) >= 2:
        found[0], found[1] = found[1], found[0]
    stride = found[0] if len(found) > 0 else [1] * spatial
    pad = found[1] if len(found) > 1 else [0] * spatial
    dil = found[2] if len(found) > 2 else [1] * spatial
    return stride, pad, dil


def _conv_cost(base: str, tensors: list, args: dict) -> tuple[float, float] | None:
    """Convolution: 2 * N * C_out * (C_in/groups) * prod(kernel) * prod(output); backward twice that."""
    if base == "convolution_backward" and len(tensors) >= 3:
        (go, s), (x, _), (w, _) = tensors[0], tensors[1], tensors[2]
        flops = 2.0 * go[0] * w[0] * _numel(w[1:]) * _numel(go[2:])
        return 2 * flops, (2 * _numel(go) + 2 * _numel(x) + 2 * _numel(w)) * s
    if base in ("convolution", "_convolution", "cudnn_convolution", "mkldnn_convolution", "conv1d", "conv2d",
                "conv3d", "miopen_convolution", "_slow_conv2d_forward", "slow_conv3d_forward",
                "convolution_overrideable", "thnn_conv2d", "_nnpack_spatial_convolution") and len(tensors) >= 2:
        (x, s), (w, _) = tensors[0], tensors[1]
        spatial = len(x) - 2
        if spatial < 1 or len(w) != len(x):
            return None
        stride, pad, dil = _conv_params(base, args, spatial)
        out = [_conv_out(x[2 + i], w[2 + i], stride[i], pad[i], dil[i]) for i in range(spatial)]
        out_numel = x[0] * w[0] * _numel(out)
        flops = 2.0 * x[0] * w[0] * _numel(w[1:]) * _numel(out)
        return flops, (_numel(x) + _numel(w) + out_numel) * s
    return None


def _elementwise_cost(base: str, tensors: list) -> tuple[float, float] | None:
    """Elementwise and reduction ops: every operand read once, a result of the largest operand written."""
    plain = base.rstrip("_") if base not in _ELEMENTWISE else base
    if base in _VIEWS or plain in _VIEWS:
        return 0.0, 0.0
    if not tensors:
        return None
    largest = max(_numel(t) * s for t, s in tensors)
    read = sum(_numel(t) * s for t, s in tensors)
    n = max(_numel(t) for t, _ in tensors)
    if plain in _ELEMENTWISE or base in _ELEMENTWISE or plain.startswith("_foreach_"):
        return float(_ELEMENTWISE_FLOPS.get(plain, 1) * n), float(read + largest)
    return 0.0, float(read + largest)  # an op with shapes but no known arithmetic: data movement only


def comm_bytes(args: dict) -> float | None:
    """Message size of a collective from record_param_comms ('In msg nelems' x dtype) or its input shapes."""
    nelems = args.get("In msg nelems") or args.get("Out msg nelems")
    dtype = args.get("dtype")
    if isinstance(nelems, (int, float)) and nelems > 0:
        return float(nelems) * DTYPE_BYTES.get(str(dtype), 4)
    dims = args.get("Input Dims")
    if isinstance(dims, list):
        types = args.get("Input type") or []
        total = 0.0
        for i, shape in enumerate(dims):
            size = DTYPE_BYTES.get(types[i] if i < len(types) else "", 4)
            if isinstance(shape, list) and shape and isinstance(shape[0], list):  # a TensorList
                total += sum(_numel(s) for s in shape) * size
            elif isinstance(shape, list) and shape and i < len(types) and types[i] in DTYPE_BYTES:
                total += _numel(shape) * size
        return total or None
    return None


# ----------------------------------------------------------------------------------------------------------
# Input and output bytes of one call (what operator fusion would keep out of memory)
# ----------------------------------------------------------------------------------------------------------

# ops whose work, when there is any, is done by a child op the profiler records (to -> _to_copy -> copy_,
# clone -> copy_): they move no bytes themselves
IO_WRAPPERS = {"to", "_to_copy", "type_as", "contiguous", "clone", "result_type", "repeat", "expand_as"}
_AUTOGRAD = ("torch::autograd::", "autograd::")
REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "norm", "linalg_vector_norm", "argmax", "argmin",
              "var", "std", "prod", "var_mean", "std_mean", "logsumexp"}


@dataclass(frozen=True)
class TensorIO:
    """The tensors one call reads and the one it writes: element counts of each input, bytes in and out."""

    in_numels: tuple[int, ...]
    out_numel: int
    in_bytes: float
    out_bytes: float


def _tensor_lists(dims: list, types: list) -> list[tuple[list, int]]:
    """(shape, element bytes) of every tensor in the TensorList arguments (cat, stack), their dtype unknown
    to the profiler: taken as that of the first typed tensor argument, else 4 bytes."""
    size = next((DTYPE_BYTES[t] for t in types if t in DTYPE_BYTES), 4)
    return [(s, size) for shape in dims if isinstance(shape, list) and shape and isinstance(shape[0], list)
            for s in shape if isinstance(s, list) and s]


def io_bytes(name: str, args: dict) -> TensorIO | None:
    """The input tensors one call reads and the output it writes, from its recorded shapes (None without).

    Model (one pass, nothing cached): every tensor argument is read once; the output is
    - ``copy_(dst, src)``: dst (a cast writes the destination's dtype); reads src only;
    - an in-place op (``mul_``): its first argument;
    - ``cat``/``stack``: all the listed tensors together;
    - a reduction with an ``out=`` tensor recorded after its input: that tensor; without one, the input over
      its last dimension (a norm's statistics);
    - anything else (elementwise, broadcasting): the largest argument.
    Views, wrappers that hand their work to a recorded child (``to``, ``clone``) and autograd nodes read and
    write nothing.
    """
    dims = args.get("Input Dims")
    if not isinstance(dims, list):
        return None
    raw_types = args.get("Input type")
    types = raw_types if isinstance(raw_types, list) else []
    base = name.split("::", 1)[-1]
    if base in _VIEWS or base in IO_WRAPPERS or "::" not in name or name.startswith(_AUTOGRAD):
        return TensorIO((), 0, 0.0, 0.0)  # autograd nodes (MulBackward0) do their work in recorded aten ops
    tensors = _tensors(dims, types)
    if base in ("cat", "stack", "_cat"):
        listed = _tensor_lists(dims, types)
        total = sum(_numel(t) * s for t, s in listed)
        return TensorIO(tuple(_numel(t) for t, _ in listed), sum(_numel(t) for t, _ in listed), float(total),
                        float(total)) if listed else None
    if not tensors:
        return None
    numels = tuple(_numel(t) for t, _ in tensors)
    sizes = [_numel(t) * s for t, s in tensors]
    if base == "copy_" and len(tensors) >= 2:
        return TensorIO(numels[1:2], numels[0], float(sizes[1]), float(sizes[0]))
    if base.endswith("_"):
        return TensorIO(numels, numels[0], float(sum(sizes)), float(sizes[0]))
    if base in REDUCTIONS:
        if len(tensors) > 1 and numels[-1] < numels[0]:
            return TensorIO(numels[:-1], numels[-1], float(sum(sizes[:-1])), float(sizes[-1]))
        last = max(int(tensors[0][0][-1]), 1)
        return TensorIO(numels, numels[0] // last, float(sum(sizes)), float(sizes[0] // last))
    k = max(range(len(tensors)), key=lambda i: sizes[i])
    return TensorIO(numels, numels[k], float(sum(sizes)), float(sizes[k]))

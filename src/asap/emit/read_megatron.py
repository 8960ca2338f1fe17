"""Megatron-LM ``pretrain_gpt.py`` arguments read back into asap's job (the inverse of ``asap.emit.megatron``).

Input: an argument list (what ``asap emit --format megatron`` writes), a launch script (``examples/*/train_*.sh``:
the words after ``pretrain_*.py``, built by ``asap.emit.read_shell``; the launcher's ``--nproc_per_node`` /
``--nnodes`` give the cluster's size), or a functional-test YAML (``tests/functional_tests/test_cases/*/
model_config.yaml``: ``MODEL_ARGS`` as a mapping of flag to value). Each flag takes Megatron-LM core_r0.14.0's
default when absent (``megatron/training/arguments.py`` and ``validate_args``): LayerNorm, learned absolute
positions, GeLU, biases on every linear layer, tied embeddings, ``--micro-batch-size`` 1, a global batch of
mbs * dp, no distributed optimizer (ZeRO 0), no recomputation (``--recompute-granularity selective`` alone
recomputes ``core_attn``), ``--moe-token-dispatcher-type allgather``, ``--moe-router-topk`` 2,
``--moe-aux-loss-coeff`` 0, ``--cp-comm-type p2p``, ``--ffn-hidden-size`` 4h (8h/3 rounded down to a multiple of
64 with ``--swiglu``), the expert tensor-parallel size tp, fp32 without ``--bf16`` / ``--fp16``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from asap.emit.read_common import Parsed, check_model_given, number, positive_int, refuse_key
from asap.errors import AsapError
from asap.spec.layout import default_chunk_layers
from asap.spec.model import ModelSpec, model_from_dict

FMT = "megatron"
MARKER = re.compile(r"(^|/)pretrain_\w+\.py$")
# Tokenizers whose vocabulary is fixed by their name (megatron/training/tokenizer: GPT-2's BPE, Llama 2's
# SentencePiece); any other tokenizer needs --vocab-size.
TOKENIZER_VOCAB = {"GPT2BPETokenizer": 50257, "Llama2Tokenizer": 32000}

# The flags every reader function below maps (anything else must be in IGNORED or is refused).
MAPPED = (
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--kv-channels", "--vocab-size",
    "--make-vocab-size-divisible-by", "--normalization", "--norm-epsilon",
    "--position-embedding-type", "--rotary-base", "--rotary-percent", "--rope-type", "--rotary-scaling-factor",
    "--mscale", "--mscale-all-dim", "--use-rope-scaling", "--rope-scaling-factor",
    "--rotary-seq-len-interpolation-factor", "--group-query-attention", "--num-query-groups", "--swiglu",
    "--squared-relu", "--disable-bias-linear", "--add-qkv-bias", "--qk-layernorm",
    "--untie-embeddings-and-output-weights", "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank",
    "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--mtp-num-layers", "--num-experts", "--moe-router-topk",
    "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size", "--moe-layer-freq",
    "--moe-router-score-function", "--moe-router-pre-softmax", "--moe-router-enable-expert-bias",
    "--moe-router-bias-update-rate", "--moe-router-num-groups", "--moe-router-group-topk",
    "--moe-router-topk-scaling-factor", "--moe-router-load-balancing-type", "--moe-aux-loss-coeff",
    "--moe-z-loss-coeff", "--moe-expert-capacity-factor", "--moe-token-drop-policy", "--tokenizer-type",
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size", "--cp-comm-type",
    "--hierarchical-context-parallel-sizes",
    "--num-virtual-stages-per-pipeline-rank", "--num-layers-per-virtual-pipeline-stage",
    "--pipeline-model-parallel-layout", "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
    "--expert-model-parallel-size", "--expert-tensor-parallel-size", "--micro-batch-size", "--global-batch-size",
    "--seq-length", "--sequence-parallel", "--use-distributed-optimizer", "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy", "--num-distributed-optimizer-instances", "--grad-reduce-in-bf16",
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--recompute-modules",
    "--recompute-activations", "--moe-token-dispatcher-type", "--moe-enable-deepep",
    "--overlap-moe-expert-parallel-comm", "--bf16", "--fp16", "--fp8-format", "--fp8-recipe", "--fp8-param-gather",
    "--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--moe-grouped-gemm")

# Flags that do not change what a step computes or how long it takes, skipped by name (docs/read.md):
IGNORED = (
    # paths, data, tokenizer files, checkpointing
    "--data-path", "--train-data-path", "--valid-data-path", "--test-data-path", "--data-cache-path", "--mock-data",
    "--split", "--vocab-file", "--merge-file", "--tokenizer-model", "--tiktoken-pattern", "--save", "--load",
    "--save-interval", "--ckpt-format", "--no-load-optim", "--no-load-rng", "--no-save-optim", "--no-save-rng",
    "--finetune", "--auto-detect-ckpt-format", "--dist-ckpt-strictness", "--async-save", "--use-dist-ckpt",
    "--no-mmap-bin-files", "--no-create-attention-mask-in-dataloader", "--num-workers", "--dataloader-type",
    "--data-args-path", "--per-split-data-args-path", "--ckpt-fully-parallel-load", "--ckpt-assume-constant-structure",
    "--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss", "--object-storage-cache-path",
    # logging, evaluation, profiling, timing
    "--log-interval", "--eval-interval", "--eval-iters", "--tensorboard-dir", "--wandb-project", "--wandb-exp-name",
    "--wandb-save-dir", "--log-throughput", "--log-timers-to-tensorboard", "--log-validation-ppl-to-tensorboard",
    "--log-memory-to-tensorboard", "--log-params-norm", "--log-num-zeros-in-grad", "--timing-log-level",
    "--timing-log-option", "--tensorboard-log-interval", "--tensorboard-queue-size", "--profile",
    "--profile-step-start", "--profile-step-end", "--profile-ranks", "--use-pytorch-profiler", "--log-progress",
    "--logging-level", "--log-straggler", "--log-energy", "--log-world-size-to-tensorboard",
    "--log-loss-scale-to-tensorboard", "--log-batch-size-to-tensorboard", "--record-memory-history",
    # the run's length and the optimizer's hyper-parameters (the step is the same)
    "--train-iters", "--train-samples", "--exit-duration-in-mins", "--exit-interval", "--lr", "--min-lr",
    "--lr-decay-style", "--lr-decay-iters", "--lr-decay-samples", "--lr-warmup-iters", "--lr-warmup-samples",
    "--lr-warmup-fraction", "--lr-warmup-init", "--decoupled-lr", "--decoupled-min-lr", "--weight-decay",
    "--weight-decay-incr-style", "--start-weight-decay", "--end-weight-decay", "--clip-grad", "--adam-beta1",
    "--adam-beta2", "--adam-eps", "--optimizer", "--init-method-std", "--seed", "--attention-dropout",
    "--hidden-dropout", "--loss-scale", "--initial-loss-scale", "--min-loss-scale", "--loss-scale-window",
    "--hysteresis", "--override-opt_param-scheduler", "--use-checkpoint-opt_param-scheduler",
    "--calculate-per-token-loss", "--moe-router-dtype", "--moe-per-layer-logging", "--moe-aux-loss-coeff-ignore",
    "--no-check-for-nan-in-loss-and-grad", "--check-for-nan-in-loss-and-grad", "--deterministic-mode",
    "--apply-layernorm-1p", "--attention-softmax-in-fp32", "--accumulate-allreduce-grads-in-fp32",
    "--fp8-amax-history-len", "--fp8-amax-compute-algo", "--fp8-margin", "--use-mcore-models",
    "--no-position-embedding", "--max-position-embeddings", "--encoder-seq-length", "--mscale-all-dim-ignore",
    "--rerun-mode", "--use-persistent-ckpt-worker", "--dist-ckpt-optim-fully-reshardable",
    "--init-model-with-meta-device", "--manual-gc", "--manual-gc-interval", "--empty-unused-memory-level",
    "--distributed-timeout-minutes", "--distributed-backend", "--transformer-impl", "--attention-backend",
    "--use-flash-attn", "--spec", "--untie-embeddings-and-output-weights-ignore",
    # data-parallel and kernel settings asap prices one way (docs/read.md: overlapped collectives, fused kernels,
    # grouped GEMMs, the flash-attention kernel)
    "--overlap-grad-reduce", "--overlap-param-gather", "--no-gradient-accumulation-fusion",
    "--gradient-accumulation-fusion", "--no-masked-softmax-fusion", "--no-bias-gelu-fusion",
    "--no-bias-swiglu-fusion", "--no-bias-dropout-fusion", "--no-rope-fusion", "--cross-entropy-loss-fusion",
    "--cross-entropy-fusion-impl", "--bias-swiglu-fusion", "--ddp-bucket-size", "--ddp-average-in-collective",
    "--outer-dp-sharding-strategy", "--tp-comm-overlap", "--overlap-param-gather-with-optimizer-step",
    "--align-param-gather", "--moe-permute-fusion", "--moe-router-fusion", "--use-torch-fsdp2-ignore",
    "--enable-experimental", "--no-persist-layer-norm", "--persist-layer-norm", "--deallocate-pipeline-outputs",
)


def _tokens(path: Path, text: str) -> tuple[list[str], dict[str, Any]]:
    """The trainer's argument words and what the launcher states (nodes, devices per node)."""
    if path.suffix.lower() in (".yaml", ".yml"):
        return _yaml_tokens(text), {}
    from asap.emit.read_shell import Shell, launch_line, logical_lines

    if not any(re.search(r"(^|[\s/\"'])pretrain_\w+\.py", line) for line in logical_lines(text)):
        return Shell().words("\n".join(logical_lines(text))), {}
    launcher, words, shell = launch_line(text, MARKER, "script")
    return words, launcher_size(launcher)


def _yaml_tokens(text: str) -> list[str]:
    import yaml

    d = yaml.safe_load(text)
    args = d.get("MODEL_ARGS") if isinstance(d, dict) else None
    if not isinstance(args, dict):
        raise AsapError("MODEL_ARGS", "missing or not a mapping of flag to value")
    words: list[str] = []
    for k, v in args.items():
        if v is False:
            continue
        words.append(str(k))
        if v is not True and v is not None:
            words += [str(x) for x in v] if isinstance(v, list) else [str(v)]
    return words


def launcher_size(words: list[str]) -> dict[str, Any]:
    """torchrun / deepspeed launcher sizes: ``--nproc_per_node`` / ``--num_gpus`` and ``--nnodes`` /
    ``--num_nodes``."""
    out: dict[str, Any] = {}
    names = {"--nproc_per_node": "devices_per_node", "--nproc-per-node": "devices_per_node",
             "--num_gpus": "devices_per_node", "--nnodes": "nodes", "--num_nodes": "nodes"}
    for i, w in enumerate(words):
        key, _, value = w.partition("=")
        if key in names:
            value = value or (words[i + 1] if i + 1 < len(words) else "")
            if value.isdigit():
                out[names[key]] = int(value)
    return out


def parse_args(words: list[str]) -> dict[str, list[str]]:
    """Flag -> its values (the words up to the next flag; [] for a switch); a later flag wins, as argparse."""
    out: dict[str, list[str]] = {}
    key = None
    for w in words:
        if w.startswith("--") and not re.fullmatch(r"--?\d.*", w):
            key, _, value = w.partition("=")
            out[key] = [value] if value else []
        elif key is not None:
            out[key].append(w)
        else:
            raise AsapError(w, "a value before any Megatron-LM flag")
    return out


class Args:
    """The parsed flags with typed getters (each names its flag in the error)."""

    def __init__(self, flags: dict[str, list[str]]):
        self.flags = flags

    def has(self, flag: str) -> bool:
        return flag in self.flags

    def one(self, flag: str) -> str | None:
        v = self.flags.get(flag)
        if v is None:
            return None
        if len(v) != 1:
            raise AsapError(flag, f"takes one value, got {' '.join(v) or 'none'}")
        return v[0]

    def int(self, flag: str, default: Any = None) -> Any:
        v = self.one(flag)
        return default if v is None else positive_int(v, flag)

    def float(self, flag: str, default: Any = None) -> Any:
        v = self.one(flag)
        return default if v is None else number(v, flag)

    def str(self, flag: str, default: Any = None) -> Any:
        v = self.one(flag)
        return default if v is None else v


def check_known(flags: dict[str, list[str]], mapped=MAPPED, ignored=IGNORED, fmt: str = FMT) -> None:
    for flag in flags:
        if flag not in mapped and flag not in ignored:
            raise refuse_key(fmt, flag)


def read(path: Path, text: str, *, model=None, seq_len=None, cluster=None) -> Parsed:
    devices = cluster.num_devices if cluster is not None else None
    words, size = _tokens(path, text)
    flags = parse_args(words)
    check_known(flags)
    return parsed_from_args(Args(flags), size, model, seq_len, path.stem, devices)


def parsed_from_args(a: Args, size: dict[str, Any], given_model, seq_len, name: str, devices=None) -> Parsed:
    m = check_model_given(read_model(a, name), given_model)
    seq = a.int("--seq-length", seq_len)
    if seq is None:
        raise AsapError("--seq-length", "missing")
    s = read_strategy(a, m)
    if size.get("nodes") and size.get("devices_per_node"):
        devices = size["nodes"] * size["devices_per_node"]
    gb = a.int("--global-batch-size")
    if gb is None:  # Megatron's default: one micro-batch per data-parallel rank
        if not devices:
            raise AsapError("--global-batch-size", "missing (Megatron's default mbs * dp needs the device count)")
        gb = s["mbs"] * devices // (s.get("tp", 1) * s.get("pp", 1) * s.get("cp", 1))
    return Parsed(m, gb, seq, precision(a), s, nodes=size.get("nodes"), devices_per_node=size.get("devices_per_node"))


def precision(a: Args) -> str:
    if a.has("--fp4-format"):
        raise refuse_key(FMT, "--fp4-format")
    if a.has("--fp8-format"):
        if not (a.has("--bf16") or a.has("--fp16")):
            raise AsapError("--fp8-format", "fp8 without --bf16 (asap prices fp8 GEMMs over bf16 weights)")
        return "fp8"
    return "bf16" if a.has("--bf16") else "fp16" if a.has("--fp16") else "fp32"


# ---- the model ---------------------------------------------------------------------------------------------------

def _vocab(a: Args) -> int:
    v = a.int("--vocab-size")
    if v is not None:
        return v
    tok = a.str("--tokenizer-type")
    if tok in TOKENIZER_VOCAB:
        return TOKENIZER_VOCAB[tok]
    raise AsapError("--vocab-size", f"missing: the tokenizer ({tok or 'none named'}) sets the vocabulary; add "
                                    "--vocab-size")


def read_model(a: Args, name: str) -> ModelSpec:
    h, heads = a.int("--hidden-size"), a.int("--num-attention-heads")
    layers = a.int("--num-layers")
    for flag, v in (("--num-layers", layers), ("--hidden-size", h), ("--num-attention-heads", heads)):
        if v is None:
            raise AsapError(flag, "missing")
    act = "swiglu" if a.has("--swiglu") else "relu2" if a.has("--squared-relu") else "gelu"
    ffn = a.int("--ffn-hidden-size", int(4 * h * 2 / 3 / 64) * 64 if act == "swiglu" else 4 * h)
    vocab, tp = _vocab(a), a.int("--tensor-model-parallel-size", 1)
    step = a.int("--make-vocab-size-divisible-by", 128) * tp
    padded = -(-vocab // step) * step
    if a.float("--rotary-percent", 1.0) != 1.0:
        raise refuse_key(FMT, "--rotary-percent", "rotary on part of the head (asap's RoPE spans the head)")
    d: dict[str, Any] = {
        "name": name, "num_layers": layers, "hidden_size": h, "ffn_hidden_size": ffn, "num_attention_heads": heads,
        "vocab_size": vocab, "vocab_pad_multiple": 1 if padded == vocab else step, "activation": act,
        "norm": _choice(a, "--normalization", {"RMSNorm": "rmsnorm", "LayerNorm": "layernorm"}, "LayerNorm"),
        "norm_eps": a.float("--norm-epsilon", 1e-5),
        "tie_embeddings": not a.has("--untie-embeddings-and-output-weights"), "qk_norm": False,
        "num_kv_heads": a.int("--num-query-groups", heads) if a.has("--group-query-attention") else heads}
    if a.has("--kv-channels"):
        d["head_dim"] = a.int("--kv-channels")
    d.update(_bias(a))
    d.update(_rope(a))
    if a.has("--multi-latent-attention"):
        d["mla"] = {"q_lora_rank": a.int("--q-lora-rank"), "kv_lora_rank": a.int("--kv-lora-rank", 32),
                    "qk_nope_head_dim": a.int("--qk-head-dim", 128), "qk_rope_head_dim": a.int("--qk-pos-emb-head-dim", 64),
                    "v_head_dim": a.int("--v-head-dim", 128)}
        d.pop("head_dim", None)
        d["num_kv_heads"] = heads
    elif a.has("--qk-layernorm"):
        d["qk_norm"] = True
    if a.has("--mtp-num-layers"):
        d["mtp_layers"] = a.int("--mtp-num-layers")
    if a.has("--num-experts"):
        d["moe"] = _moe(a, layers, ffn)
    return model_from_dict(d, "model")


def _choice(a: Args, flag: str, table: dict[str, str], default: str) -> str:
    v = a.str(flag, default)
    if v not in table:
        raise AsapError(flag, f"must be one of {', '.join(table)}, got {v!r}")
    return table[v]


def _bias(a: Args) -> dict[str, Any]:
    """``--add-bias-linear`` is Megatron's default: every linear layer biased unless ``--disable-bias-linear``."""
    if not a.has("--disable-bias-linear"):
        return {"attention_bias": "all", "mlp_bias": True}
    return {"attention_bias": "qkv" if a.has("--add-qkv-bias") else "none", "mlp_bias": False}


def _rope(a: Args) -> dict[str, Any]:
    kind = a.str("--position-embedding-type", "learned_absolute")
    if kind == "learned_absolute":
        return {"position_embedding": "learned"}
    if kind != "rope":
        raise AsapError("--position-embedding-type", f"must be rope or learned_absolute, got {kind!r}")
    out: dict[str, Any] = {"position_embedding": "rope", "rope_theta": float(a.int("--rotary-base", 10000))}
    mla = a.has("--multi-latent-attention")
    rope_type = a.str("--rope-type", "yarn" if mla else "rope")
    if rope_type == "yarn":
        if not mla:
            raise refuse_key(FMT, "--rope-type", "YaRN without --multi-latent-attention (MLA's at core_r0.14.0)")
        out["rope_scaling"] = {"type": "yarn", "factor": max(a.float("--rotary-scaling-factor", 1.0), 1.0),
                               "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
                               "mscale": a.float("--mscale", 1.0), "mscale_all_dim": a.float("--mscale-all-dim", 0.0)}
    elif a.has("--use-rope-scaling"):
        out["rope_scaling"] = {"type": "llama3", "factor": a.float("--rope-scaling-factor", 8.0),
                               "original_max_position_embeddings": 8192}
    elif a.has("--rotary-seq-len-interpolation-factor"):
        out["rope_scaling"] = {"type": "linear", "factor": float(a.int("--rotary-seq-len-interpolation-factor"))}
    return out


def layer_freq(text: str, layers: int) -> int:
    """``--moe-layer-freq``: 1 (every layer), or a list of 0/1 per layer (``([0]*3+[1]*58)``); the leading dense
    layers asap models (``first_dense_layers``)."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
        pattern = _pattern(tree)
    except (SyntaxError, ValueError):
        raise AsapError("--moe-layer-freq", f"must be 1 or a list of 0/1 per layer, got {text!r}") from None
    if isinstance(pattern, int):
        if pattern != 1:
            raise refuse_key(FMT, "--moe-layer-freq", f"an MoE layer every {pattern} layers (asap models leading "
                                                      "dense layers, then MoE)")
        return 0
    dense = len(pattern) - len(pattern[len(pattern) - sum(pattern):]) if pattern else 0
    if len(pattern) != layers or pattern != [0] * dense + [1] * (layers - dense):
        raise refuse_key(FMT, "--moe-layer-freq", "a layer pattern other than dense layers first, then MoE")
    return dense


def _pattern(node) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.List):
        return [_pattern(e) for e in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _pattern(node.left) * _pattern(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _pattern(node.left) + _pattern(node.right)
    raise ValueError


def _moe(a: Args, layers: int, ffn: int) -> dict[str, Any]:
    expert_ffn = a.int("--moe-ffn-hidden-size", ffn)
    shared = 0
    if a.has("--moe-shared-expert-intermediate-size"):
        width = a.int("--moe-shared-expert-intermediate-size")
        if width % expert_ffn:
            raise refuse_key(FMT, "--moe-shared-expert-intermediate-size", f"{width}, not a multiple of the expert "
                                                                          f"width {expert_ffn}")
        shared = width // expert_ffn
    top_k = a.int("--moe-router-topk", 2)
    score = a.str("--moe-router-score-function", "softmax")
    balance = a.str("--moe-router-load-balancing-type", "aux_loss")
    kinds = {"aux_loss": "global", "seq_aux_loss": "sequence", "none": "none"}
    if balance not in kinds:
        raise refuse_key(FMT, "--moe-router-load-balancing-type", f"{balance} (asap reads aux_loss, seq_aux_loss, none)")
    coef = a.float("--moe-aux-loss-coeff", 0.0)
    e: dict[str, Any] = {
        "num_experts": a.int("--num-experts"), "top_k": top_k, "expert_ffn_hidden_size": expert_ffn,
        "shared_experts": shared, "score_func": score,
        "norm_topk_prob": not (score == "softmax" and a.has("--moe-router-pre-softmax")),
        "expert_bias": a.has("--moe-router-enable-expert-bias"),
        "expert_bias_update_rate": a.float("--moe-router-bias-update-rate", 1e-3),
        "routed_scaling_factor": a.float("--moe-router-topk-scaling-factor", 1.0),
        "aux_loss": kinds[balance] if coef else "none", "aux_loss_coef": coef if kinds[balance] != "none" else 0.0,
        "z_loss_coef": a.float("--moe-z-loss-coeff", 0.0)}
    if a.has("--moe-router-num-groups"):
        e.update(n_group=a.int("--moe-router-num-groups"), topk_group=a.int("--moe-router-group-topk"))
    if a.has("--moe-expert-capacity-factor"):
        e.update(capacity_factor=a.float("--moe-expert-capacity-factor"),
                 drop_policy=a.str("--moe-token-drop-policy", "probs"))
    if a.has("--moe-layer-freq"):
        e["first_dense_layers"] = layer_freq(a.str("--moe-layer-freq"), layers)
    return e


# ---- the strategy ------------------------------------------------------------------------------------------------

def read_strategy(a: Args, model: ModelSpec) -> dict[str, Any]:
    tp, pp = a.int("--tensor-model-parallel-size", 1), a.int("--pipeline-model-parallel-size", 1)
    s: dict[str, Any] = {"tp": tp, "pp": pp, "cp": a.int("--context-parallel-size", 1),
                         "mbs": a.int("--micro-batch-size", 1),
                         "sp": int(a.has("--sequence-parallel") and tp > 1)}  # validate_args: tp=1 turns it off
    s.update(_cp_comm(a, s["cp"]))
    s.update(_pipeline(a, model, pp))
    if model.moe is not None:
        s["ep"] = a.int("--expert-model-parallel-size", 1)
        s["etp"] = a.int("--expert-tensor-parallel-size", tp)
        s.update(_dispatch(a))
    s.update(_data_parallel(a))
    s["recompute"] = _recompute(a, model, pp, s.get("vpp", 1))
    s.update(_offload(a))
    return s


def _pipeline(a: Args, model: ModelSpec, pp: int) -> dict[str, Any]:
    """vpp and the layer split: ``--pipeline-model-parallel-layout`` (``E``/``t``/``m``/``L`` per virtual stage,
    ``|`` between), ``--num-virtual-stages-per-pipeline-rank`` or ``--num-layers-per-virtual-pipeline-stage``, and
    the uneven first / last stages (``--decoder-first/last-pipeline-num-layers``)."""
    L = model.num_layers
    out: dict[str, Any] = {}
    if a.has("--pipeline-model-parallel-layout"):
        chunks = [part.count("t") for part in a.str("--pipeline-model-parallel-layout").replace('"', "").split("|")]
        if len(chunks) % pp or sum(chunks) != L:
            raise AsapError("--pipeline-model-parallel-layout", f"{len(chunks)} stages of {sum(chunks)} layers for "
                                                                f"pp={pp} and {L} layers")
        vpp = len(chunks) // pp
        out["vpp"] = vpp
        if list(chunks) != list(default_chunk_layers(L, pp * vpp)):
            out["layer_split"] = "/".join(map(str, chunks))
    elif a.has("--num-virtual-stages-per-pipeline-rank"):
        out["vpp"] = a.int("--num-virtual-stages-per-pipeline-rank")
    elif a.has("--num-layers-per-virtual-pipeline-stage"):
        per = a.int("--num-layers-per-virtual-pipeline-stage")
        if L % (pp * per):
            raise AsapError("--num-layers-per-virtual-pipeline-stage", f"{per} does not divide {L} layers over pp={pp}")
        out["vpp"] = L // (pp * per)
    first, last = a.int("--decoder-first-pipeline-num-layers"), a.int("--decoder-last-pipeline-num-layers")
    if (first or last) and pp > 1:
        if out.get("vpp", 1) > 1:
            raise refuse_key(FMT, "--decoder-first-pipeline-num-layers", "uneven first/last stages with virtual stages")
        middle = L - (first or 0) - (last or 0)
        inner = pp - (first is not None) - (last is not None)
        if inner < 0 or (inner and middle % inner) or (not inner and middle):
            raise AsapError("--decoder-first-pipeline-num-layers", f"the other stages cannot split {middle} layers")
        split = ([first] if first is not None else []) + [middle // inner] * inner if inner else \
            ([first] if first is not None else [])
        split += [last] if last is not None else []
        out["layer_split"] = "/".join(map(str, split))
    if out.get("vpp", 1) > 1:
        out["schedule"] = "interleaved"
    elif pp > 1:
        out["schedule"] = "1f1b"
    return out


def _dispatch(a: Args) -> dict[str, Any]:
    kind = a.str("--moe-token-dispatcher-type", "allgather")
    if kind == "flex":
        if not a.has("--moe-enable-deepep"):
            raise refuse_key(FMT, "--moe-token-dispatcher-type", "flex without --moe-enable-deepep")
        kind = "dedup"
    elif kind not in ("alltoall", "allgather"):
        raise AsapError("--moe-token-dispatcher-type", f"must be alltoall, allgather or flex, got {kind!r}")
    return {"dispatcher": kind, "a2a_overlap": int(a.has("--overlap-moe-expert-parallel-comm"))}


def _data_parallel(a: Args) -> dict[str, Any]:
    """ZeRO from the distributed optimizer / Megatron-FSDP's sharding strategy; 16-bit gradient reduction; the
    optimizer instances (hybrid sharding)."""
    zero = 1 if a.has("--use-distributed-optimizer") else 0
    if a.has("--use-megatron-fsdp"):
        table = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
        strategy = a.str("--data-parallel-sharding-strategy", "no_shard")
        if strategy not in table:
            raise AsapError("--data-parallel-sharding-strategy", f"must be one of {', '.join(table)}, got {strategy!r}")
        zero = table[strategy]
    out = {"zero": zero, "dp_replicate": a.int("--num-distributed-optimizer-instances", 1)}
    if a.has("--grad-reduce-in-bf16") and zero < 3:  # under Megatron-FSDP's zero 3 asap prices bf16 reduction
        out["grad_bf16"] = 1
    if a.has("--fp8-param-gather"):
        out["fp8_param"] = 1
    return out


def _recompute(a: Args, model: ModelSpec, pp: int, vpp: int) -> str:
    from asap.emit.megatron import SELECTIVE_MODULES, modules_for

    gran = a.str("--recompute-granularity")
    if a.has("--recompute-activations"):
        gran = gran or "selective"
    if gran is None:
        return "none"
    if gran == "full":
        method, n = a.str("--recompute-method", "uniform"), a.int("--recompute-num-layers", 1)
        per_stage = model.num_layers // max(pp * vpp, 1)
        if (method == "uniform" and n == 1) or (method == "block" and n >= per_stage):
            return "full"
        raise refuse_key(FMT, "--recompute-num-layers", f"{method} recomputation of {n} layers (asap recomputes "
                                                        "every layer or none)")
    if gran != "selective":
        raise AsapError("--recompute-granularity", f"must be full or selective, got {gran!r}")
    mods = a.flags.get("--recompute-modules") or ["core_attn"]
    mods = [m.strip("\"'[],") for m in " ".join(mods).replace(",", " ").split() if m.strip("\"'[],")]
    if modules_for(model, mods) == modules_for(model, SELECTIVE_MODULES):
        return "selective"
    present = modules_for(model, mods)
    return "+".join(present) if present else "none"


def _offload(a: Args) -> dict[str, Any]:
    """``--optimizer-cpu-offload`` (activation offload is TransformerConfig's, no core_r0.14.0 argument)."""
    out: dict[str, Any] = {}
    if a.has("--optimizer-cpu-offload"):
        out["offload_opt"] = 1
    return out


def _cp_comm(a: "Args", cp: int) -> dict[str, Any]:
    """cp_comm (and a2a+p2p's inner Ulysses degree) from --cp-comm-type and --hierarchical-context-parallel-sizes
    (parallel_state: their product is cp, the first the a2a group's; Transformer Engine spells the all-gather
    all_gather, Megatron's help allgather: both read)."""
    cp_comm = [{"all_gather": "allgather"}.get(c, c) for c in a.flags.get("--cp-comm-type", ["p2p"])]
    if len(set(cp_comm)) != 1 or cp_comm[0] not in ("p2p", "a2a", "allgather", "a2a+p2p"):
        raise refuse_key(FMT, "--cp-comm-type",
                         f"{' '.join(cp_comm)} (one of p2p, a2a, all_gather, a2a+p2p for every layer)")
    if cp <= 1:
        return {}
    if cp_comm[0] != "a2a+p2p":
        return {"cp_comm": cp_comm[0]}
    sizes = [int(x) for x in a.flags.get("--hierarchical-context-parallel-sizes", [])]
    if len(sizes) != 2 or sizes[0] * sizes[1] != cp:
        raise refuse_key(FMT, "--hierarchical-context-parallel-sizes",
                         f"{' '.join(map(str, sizes)) or 'unset'} (a2a+p2p needs two sizes whose product is cp={cp})")
    return {"cp_comm": "a2a+p2p", "cp_a2a": sizes[0]}

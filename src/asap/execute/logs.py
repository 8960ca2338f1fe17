"""What each training stack prints, in one table: its step-time line, its loss, its out-of-memory messages and
where its profiler writes traces (``LOG_FORMATS``; ``parse_log(framework, text, ...)``).

Every pattern was read off the stack's own output (a run on this machine's CPU, or the stack's docs and
source; ``tests/execute/test_execute_logs.py`` holds the lines and says where each came from):

* Megatron-LM (``megatron/training/training.py``, ``training_log``): `` iteration 1/ 24000 | consumed samples:
  1024 | elapsed time per iteration (ms): 271607.0 | ... | lm loss: 1.192634E+01 |``; newer versions print
  ``elapsed time per iteration (ms): 283.9/290.1`` (this iteration / the running mean): the first is taken.
* torchtitan (``torchtitan/components/metrics.py``, ``MetricsProcessor.log``): ``step:  3  loss:  6.63299
  grad_norm:  2.7719  memory:  0.12GiB(0.39%)  tps: 344  tflops: 0.01  mfu: 0.00%``, every rank; ``tps`` is
  tokens per second per device over the steps since the last log, so with ``--metrics.log_freq 1`` the step
  time is tokens per step / (devices x tps).
* MaxText (``maxtext/.../metric_logger.py``): ``completed step: 4, seconds: 0.989, TFLOP/s/device: 0.012,
  Tokens/s/device: 258.8, total_weights: 512, loss: 8.049``.
* DeepSpeed (``deepspeed/runtime/engine.py``, ``wall_clock_breakdown``): ``time (ms) | fwd: 12.34 | bwd: 20.10 |
  bwd_inner: ... | bwd_allreduce: ... | step: 3.21`` once per optimizer step (the step time is fwd + bwd +
  step, as the engine itself sums them); the pipeline engine (``deepspeed/runtime/pipe/engine.py``):
  ``steps: 2 loss: 6.2094 iter time (s): 0.530 samples/sec: 15.094``.
* MindFormers (``mindformers/core/callback/callback.py``, ``MFLossMonitor``): ``{ Epoch:[  1/  2], step:[    2/
  19], loss: 10.633, per_step_time: 1752ms, ...`` (static graph) and ``{ step:[    2/   10], loss:  11.755612,
  per_step_time:    710ms, ...}`` (dynamic graph).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from enum import Enum

from asap.errors import AsapError


class Stack(str, Enum):
    MEGATRON = "megatron"
    TORCHTITAN = "torchtitan"
    MAXTEXT = "maxtext"
    DEEPSPEED = "deepspeed"
    MINDFORMERS = "mindformers"


class StepUnit(str, Enum):
    MS = "ms"                # the captured number is milliseconds per step
    S = "s"                  # seconds per step
    TOKENS_PER_DEVICE_S = "tokens/s/device"  # a throughput: step time = tokens per step / (devices x it)
    SUM_MS = "sum ms"        # several captured groups in milliseconds, summed


# torch (CUDA, ROCm, CPU), JAX/XLA, NCCL, MindSpore/Ascend and the kernel's OOM killer, in their own words
# (torch's CPU allocator: "DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes")
COMMON_OOM = (r"CUDA out of memory|OutOfMemoryError|out of memory|RESOURCE_EXHAUSTED|std::bad_alloc|MemoryError|"
              r"oom-kill|Out of memory|Killed process \d+|DefaultCPUAllocator: can't allocate memory")


@dataclass(frozen=True)
class LogFormat:
    stack: Stack
    step: str                 # regex; its groups are the step's figure(s)
    unit: StepUnit
    loss: str | None          # regex with one group
    oom: str                  # regex
    trace_glob: str | None    # relative to the trial folder, where the stack's profiler writes
    warmup: int = 1           # leading steps left out of the median (compilation, allocator warm-up)
    notes: str = ""

    def regex(self) -> re.Pattern:
        return re.compile(self.step)


LOG_FORMATS: dict[Stack, LogFormat] = {
    Stack.MEGATRON: LogFormat(
        Stack.MEGATRON, r"elapsed time per iteration \(ms\):\s*([0-9.]+)", StepUnit.MS,
        r"\blm loss:\s*([-+0-9.eE]+)", COMMON_OOM, "tensorboard/**/*.pt.trace.json*",
        notes="--log-interval 1 for a line per iteration; --profile --use-pytorch-profiler writes Kineto traces "
              "under --tensorboard-dir"),
    Stack.TORCHTITAN: LogFormat(
        Stack.TORCHTITAN, r"step:\s*\d+\s+loss:\s*[-+0-9.eE]+.*?tps:\s*([0-9,]+)", StepUnit.TOKENS_PER_DEVICE_S,
        r"step:\s*\d+\s+loss:\s*([-+0-9.eE]+)", COMMON_OOM, "outputs/profile_traces/**/rank*_trace.json",
        notes="--metrics.log_freq 1; every rank logs the same line: rank 0's are used"),
    Stack.MAXTEXT: LogFormat(
        Stack.MAXTEXT, r"completed step:\s*\d+,\s*seconds:\s*([0-9.]+)", StepUnit.S,
        r"completed step:.*?\bloss:\s*([-+0-9.eE]+)", COMMON_OOM, "out/**/*.xplane.pb",
        notes="profiler=xplane writes plugins/profile/<run>/*.xplane.pb under base_output_directory"),
    Stack.DEEPSPEED: LogFormat(
        Stack.DEEPSPEED, r"time \(ms\) \| fwd: ([0-9.]+) \| bwd: ([0-9.]+) \|.*?\| step: ([0-9.]+)|"
                         r"iter time \(s\): ([0-9.]+)", StepUnit.SUM_MS,
        r"(?:\bloss[:=]\s*|steps: \d+ loss: )([-+0-9.eE]+)", COMMON_OOM, "profile/**/rank*_trace.json",
        notes="wall_clock_breakdown: true and steps_per_print: 1 (ZeRO engine); the pipeline engine prints "
              "iter time (s) itself"),
    Stack.MINDFORMERS: LogFormat(
        Stack.MINDFORMERS, r"per_step_time:\s*([0-9.]+)ms", StepUnit.MS, r"\bloss:\s*([-+0-9.eE]+)",
        COMMON_OOM + r"|Out of Memory|Device memory is insufficient|EL0004", "profile/**/trace_view.json",
        notes="profile: True writes ascend_timeline_display / trace_view.json per rank"),
}


def log_format(stack: str | Stack) -> LogFormat:
    try:
        return LOG_FORMATS[Stack(stack)]
    except ValueError:
        raise AsapError("framework", f"must be one of {', '.join(s.value for s in Stack)}, got {stack!r}") from None


@dataclass
class ParsedLog:
    step_times_s: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)

    def step_time_s(self, warmup: int) -> float | None:
        kept = self.step_times_s[warmup:] if len(self.step_times_s) > warmup else self.step_times_s
        return statistics.median(kept) if kept else None


ANSI = re.compile(r"\x1b\[[0-9;]*m")  # torchtitan colours its lines


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _step_seconds(fmt: LogFormat, groups: tuple, tokens_per_step: float | None, devices: int | None) -> float | None:
    values = [_number(g) for g in groups if g is not None]
    if not values:
        return None
    if fmt.unit is StepUnit.MS:
        return values[0] / 1e3
    if fmt.unit is StepUnit.S:
        return values[0]
    if fmt.unit is StepUnit.SUM_MS:  # DeepSpeed: fwd + bwd + step (ms), or the pipeline's iter time (s)
        return values[0] if groups[-1] is not None else sum(values) / 1e3
    if not tokens_per_step or not devices or values[0] <= 0:
        raise AsapError("log", f"{fmt.stack.value} reports throughput (tps): the step time needs the tokens per "
                               "step and the device count")
    return tokens_per_step / (devices * values[0])


def parse_log(stack: str | Stack, text: str, *, tokens_per_step: float | None = None,
              devices: int | None = None) -> ParsedLog:
    """The step times (s) and losses ``stack`` printed in ``text``. A stack that logs the same step on every
    rank (torchtitan: each rank its own tps) gives one time per step number, the slowest rank's (a step ends
    when every rank has finished it)."""
    fmt = log_format(stack)
    text = ANSI.sub("", text)
    step_no = re.compile(r"step:\s*(\d+)") if fmt.stack is Stack.TORCHTITAN else None
    times: dict = {}
    losses: dict = {}
    step_re, loss_re = fmt.regex(), re.compile(fmt.loss) if fmt.loss else None
    for i, line in enumerate(text.splitlines()):
        n = step_no.search(line) if step_no else None
        key = int(n.group(1)) if n else ("line", i)
        lm = loss_re.search(line) if loss_re else None
        if lm is not None and _number(lm.group(1)) >= 0:  # a loss may stand on its own line (DeepSpeed);
            losses.setdefault(key, _number(lm.group(1)))    # torchtitan's non-last pipeline stages print -1
        m = step_re.search(line)
        if m is None:
            continue
        t = _step_seconds(fmt, m.groups(), tokens_per_step, devices)
        if t is not None and math.isfinite(t) and t > 0:
            times[key] = max(times.get(key, 0.0), t)
    return ParsedLog(list(times.values()), list(losses.values()))


def oom_line(stack: str | Stack, text: str) -> str | None:
    """The last out-of-memory line the stack (or the kernel) printed, or None."""
    matches = list(re.finditer(log_format(stack).oom, text))
    if not matches:
        return None
    m = matches[-1]
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", m.end())
    return text[start: end if end >= 0 else len(text)].strip()


# The peak device memory a stack's log prints, where it prints one: (regex with one group, GiB per unit).
# torchtitan's metrics line (``memory:  0.12GiB(0.39%)``: the max reserved, components/metrics.py); Megatron-LM's
# ``report_memory`` (``memory (MB) | allocated: ... | max allocated: 1234.5 | ...``, MiB, megatron/training/
# utils.py); DeepSpeed's ``see_memory_usage`` (``MA 0.5 GB         Max_MA 0.6 GB``, runtime/utils.py).
PEAK_MEMORY: dict[Stack, tuple[str, float]] = {
    Stack.TORCHTITAN: (r"\bmemory:\s*([0-9.]+)GiB", 1.0),
    Stack.MEGATRON: (r"max allocated:\s*([0-9.]+)", 1.0 / 1024),
    Stack.DEEPSPEED: (r"Max_MA\s*([0-9.]+)\s*GB", 1.0),
}


def peak_memory_gb(stack: str | Stack, text: str) -> float | None:
    """The largest peak device memory (GiB) ``stack``'s log printed, or None where it prints none."""
    rule = PEAK_MEMORY.get(log_format(stack).stack)
    if rule is None:
        return None
    values = [_number(m.group(1)) * rule[1] for m in re.finditer(rule[0], ANSI.sub("", text))]
    return max(values) if values else None

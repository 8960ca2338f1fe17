"""The stacks' log parsers (asap.execute.logs) on real lines: runs on this machine (tests/data/stack_logs, see
its README) and lines quoted in the stacks' own docs and sources, each cited where it is used."""

from pathlib import Path

import pytest

from asap.errors import AsapError
from asap.execute.logs import LOG_FORMATS, Stack, log_format, oom_line, parse_log

LOGS = Path(__file__).parents[1] / "data" / "stack_logs"


def test_every_stack_has_a_format():
    assert set(LOG_FORMATS) == set(Stack)
    with pytest.raises(AsapError, match="framework"):
        log_format("keras")


def test_torchtitan_run_here_fsdp():
    # torchtitan 0.2.2 on 2 CPU processes, tiny-dense -b 8 -s 64: 512 tokens per step
    parsed = parse_log("torchtitan", (LOGS / "torchtitan-0.2.2-cpu-fsdp.log").read_text(), tokens_per_step=512,
                       devices=2)
    # one time per step, the slowest rank's: step 1 ranks print tps 139 and 149 -> 512 / (2 * 139)
    assert len(parsed.step_times_s) == 3
    assert parsed.step_times_s[0] == pytest.approx(512 / (2 * 139))
    assert parsed.step_times_s[1] == pytest.approx(512 / (2 * 404))
    assert parsed.losses == [6.6688, 6.6829, 6.58173]


def test_torchtitan_pipeline_first_stage_loss_is_ignored():
    parsed = parse_log("torchtitan", (LOGS / "torchtitan-0.2.2-cpu-pp2.log").read_text(), tokens_per_step=512,
                       devices=2)
    assert all(loss > 0 for loss in parsed.losses) and parsed.losses[0] == pytest.approx(6.65778)
    # "tps: 1,130": torchtitan groups thousands
    assert parsed.step_times_s[1] == pytest.approx(512 / (2 * 1072))


def test_torchtitan_needs_the_job_for_a_throughput():
    line = "step:  3  loss:  6.63299  grad_norm:  2.7719  memory:  0.12GiB(0.39%)  tps: 344  tflops: 0.01  mfu: 0.00%"
    # the line quoted in ../shared/frameworks-on-cpu.md (torchtitan 0.2.2 on this machine)
    with pytest.raises(AsapError, match="tokens per step"):
        parse_log("torchtitan", line)
    assert parse_log("torchtitan", line, tokens_per_step=1024, devices=4).step_times_s == [pytest.approx(1024 / 1376)]


def test_deepspeed_run_here_zero2():
    parsed = parse_log("deepspeed", (LOGS / "deepspeed-0.19.8-cpu-zero2.log").read_text())
    # only the per-optimizer-step line "time (ms) | fwd: 41.36 | bwd: 773.93 | ... | step: 38.41" counts, not
    # the *_microstep lines or the optimizer_* ones
    assert parsed.step_times_s[0] == pytest.approx((41.36 + 773.93 + 38.41) / 1e3)
    assert len(parsed.step_times_s) == 3
    assert parsed.losses[0] == pytest.approx(6.26842)


def test_deepspeed_pipeline_engine_line():
    # Megatron-DeepSpeed's MoE test script quotes the pipeline engine's final line (stored public file id
    # 34677345188, found by the exact string "iter time (s): "): DeepSpeed's runtime/pipe/engine.py format
    line = "steps: 200 loss: 5.5508 lm loss: 5.5103 moe loss: 0.0405 iter time (s): 0.936 samples/sec: 136.706"
    parsed = parse_log("deepspeed", line)
    assert parsed.step_times_s == [pytest.approx(0.936)]
    assert parsed.losses == [pytest.approx(5.5508)]


def test_maxtext_run_here():
    parsed = parse_log("maxtext", (LOGS / "maxtext-0.2.5-cpu-fsdp8.log").read_text())
    assert parsed.step_times_s == [1.003, 0.448, 0.712]
    assert parsed.losses == [6.665, 6.634, 6.617]
    assert parsed.step_time_s(warmup=1) == pytest.approx((0.448 + 0.712) / 2)


@pytest.mark.parametrize("line,ms,loss", [
    # Megatron-LM's training_log line as quoted in the OpenSeek README (stored public file id 29243440600)
    ("[default0]: [2025-05-27 15:23:07] iteration        1/    24000 | consumed samples:          1024 | "
     "elapsed time per iteration (ms): 271607.0 | throughput per GPU (TFLOP/s/GPU): 40.4 | learning rate: "
     "1.500000E-06 | global batch size:  1024 | lm loss: 1.192634E+01 | load_balancing_loss: 1.041994E+00 | "
     "loss scale: 1.0 | grad norm: 5.960 | num zeros: 0.0 | params norm: 238.330 | number of skipped iterations:"
     "    0 |", 271607.0, 11.92634),
    # Ascend ModelLink's Megatron-based llama README (stored public file id 19103095961)
    (" iteration  11/50000 | consumed samples: 5632 | consumed tokens:  11534336 | elapsed time per iteration "
     "(ms):  52728.1 | learning rate:    1.499E-05 | gloabl batch size:  512 | lm loss:  1.376514E+01 | loss "
     "scale:  65536.0 | grad norm:    459.628 |", 52728.1, 13.76514),
])
def test_megatron_lines_from_docs(line, ms, loss):
    parsed = parse_log("megatron", line)
    assert parsed.step_times_s == [pytest.approx(ms / 1e3)]
    assert parsed.losses == [pytest.approx(loss)]


def test_megatron_running_mean_form():
    # newer Megatron-LM prints "this/mean" (megatron/training/training.py: "{:.1f}/{:.1f}"); the first is this
    # iteration's time
    parsed = parse_log("megatron", " iteration 5/ 10 | elapsed time per iteration (ms): 283.9/290.1 | lm loss: 5.54 |")
    assert parsed.step_times_s == [pytest.approx(0.2839)]


@pytest.mark.parametrize("line,ms,loss", [
    # MindFormers static graph, from the MindSpore MindFormers high-availability guide (stored public file id
    # 1451715688): mindformers/core/callback/callback.py's MFLossMonitor
    ("2025-04-07 15:34:29,173 - [mindformers/core/callback/callback.py:529] - INFO - { Epoch:[  1/  2], step:[    "
     "2/   19], loss: 10.633, per_step_time: 1752ms, lr: 1e-05, overflow cond: False, loss_scale: 1.0, "
     "global_norm: [1 508834], train_throughput_per_npu: 170.738T", 1752, 10.633),
    # MindFormers dynamic graph quick start (stored public file id 69015931905)
    ("{ step:[    2/   10], loss:  11.755612, per_step_time:    710ms, load_balancing_loss:   1.106543, lr: "
     "1.000000e-05, grad_norm:  19.926786, throughput:  25.92T }", 710, 11.755612),
])
def test_mindformers_lines_from_docs(line, ms, loss):
    parsed = parse_log("mindformers", line)
    assert parsed.step_times_s == [pytest.approx(ms / 1e3)]
    assert parsed.losses[0] == pytest.approx(loss)


def test_oom_lines():
    # torch's own message (torch/csrc/.../CUDACachingAllocator.cpp: "CUDA out of memory. Tried to allocate")
    text = "step 1\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB\n"
    assert oom_line("megatron", text).startswith("torch.OutOfMemoryError")
    # XLA's (jaxlib): "RESOURCE_EXHAUSTED: Out of memory while trying to allocate"
    assert "RESOURCE_EXHAUSTED" in oom_line("maxtext", "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: "
                                                       "Out of memory while trying to allocate 1.5GiB.")
    assert oom_line("torchtitan", "step:  1  loss:  6.6  tps: 3") is None


def test_torch_cpu_allocator_oom_for_real():
    """torch's own message when its CPU allocator fails (a real allocation of 1 PiB, refused at once)."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", "import torch; torch.empty(1 << 50, dtype=torch.uint8)"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    line = oom_line("torchtitan", p.stderr)
    assert line is not None and "DefaultCPUAllocator: can't allocate memory" in line

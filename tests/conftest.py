import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# asap's user folder (Memory's memory.sqlite, calibrations) is the session's own, never the user's: a test sees
# only what the tests wrote, whichever process (or pytest-xdist worker) runs it
os.environ.setdefault("ASAP_DATA_DIR", tempfile.mkdtemp(prefix="asap-tests-"))

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

# DeepSeek-V3's Hugging Face config.json, the fields asap reads (test_spec_models, test_cli_estimate)
DEEPSEEK_V3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_hidden_layers": 61,
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_attention_heads": 128,
    "num_key_value_heads": 128, "vocab_size": 129280, "hidden_act": "silu", "q_lora_rank": 1536,
    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
    "moe_layer_freq": 1, "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
}


def run_cli(*args, timeout=300, cwd=None, env=None):
    """Run the real ``asap`` CLI in a child process; returns CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-c", "from asap.cli import main; main()", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


@pytest.fixture
def cli():
    return run_cli


# a small dense model whose every memory term is large enough to read off by hand (tests/cost: the memory terms,
# DTensor SP's gathered inputs); ``mid_dense_file`` writes it as a model file
MID_DENSE = {"name": "mid-dense", "num_layers": 4, "hidden_size": 1024, "ffn_hidden_size": 2816,
             "num_attention_heads": 8, "vocab_size": 8192}


@pytest.fixture(scope="module")
def mid_dense_file(tmp_path_factory) -> str:
    import yaml

    p = tmp_path_factory.mktemp("m") / "mid.yaml"
    p.write_text(yaml.safe_dump(MID_DENSE))
    return str(p)


def assert_one_line_error(proc, *needles):
    """Bad input: non-zero exit, exactly one line on stderr naming the problem, no traceback."""
    assert proc.returncode != 0, proc.stdout
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


# Which test files need what, one table (pyproject.toml registers the markers; the fuzz files mark themselves).
# The fast set a developer runs while editing: pytest -m "not slow and not torch and not jax and not fuzz".
FILE_MARKERS = {
    # real torch.distributed runs of the reference trainer (torchrun/gloo on CPU)
    "torch": ("test_agents", "test_align", "test_calibrate", "test_diagnose_compare", "test_diagnose_cpu",
              "test_execute_torch", "test_fusion", "test_hier_ep", "test_host_overhead", "test_layout_trainer",
              "test_run_balance", "test_run_cli", "test_run_preflight", "test_train_distributed", "test_train_model",
              "test_tune_explain", "test_subprocess_hygiene", "test_emit", "test_tune_stacks", "test_execute_logs",
              "test_diagnose_classes", "test_cli_diagnose_next", "test_tune_noise", "test_diagnose_fsdp"),
    # JAX programs on virtual CPU devices
    "jax": ("test_tune_maxtext", "test_diagnose_jax", "test_jax_bottlenecks", "test_jax_meshes", "test_jax_tune", "test_jax_xplane",
            "test_cli_diagnose_xplane"),
    # more than about a minute for the file, or many CLI processes and whole-space plans (what keeps the fast
    # set under a minute)
    "slow": ("test_docs_commands", "test_align", "test_calibrate", "test_agents", "test_host_overhead",
             "test_jax_meshes", "test_train_distributed", "test_mixed_jobs", "test_report", "test_plan",
             "test_cli_plan_estimate_agree", "test_plan_blocks", "test_plan_budget", "test_lengths", "test_cli_first_use", "test_cli_diagnose_compare",
             "test_compare_budget", "test_diagnose_labels", "test_memory_store", "test_trace_streaming",
             "test_diagnose_hta", "test_balance", "test_fused_kernels", "test_tune_explain", "test_tune_stacks",
             "test_tune_maxtext", "test_proposals_expert", "test_next_commands", "test_compact_tables",
             "test_report_layout", "test_tune_noise", "test_diagnose_fsdp", "test_llm_local", "test_quickstart",
             "test_read"),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        stem = Path(str(item.fspath)).stem
        for marker, files in FILE_MARKERS.items():
            if stem in files:
                item.add_marker(getattr(pytest.mark, marker))


def _descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every live process below ``pid``, from /proc (Linux); [] elsewhere."""
    children: dict[int, list[int]] = {}
    cmd: dict[int, str] = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            if fields[0] == "Z":  # a zombie holds nothing: its parent has not reaped it yet
                continue
            children.setdefault(int(fields[1]), []).append(int(d.name))
            cmd[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError, ValueError):
            continue
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append((p, cmd.get(p, "?")))
        todo.extend(children.get(p, []))
    return out


def pytest_sessionfinish(session, exitstatus):
    """No test may leave a process running (torchrun workers, JAX children, browsers, command executors): the
    session fails if any process started under it is still alive when it ends."""
    import os
    import time

    left = _descendants(os.getpid())
    for _ in range(20):  # processes killed at the very end may need a moment to go
        if not left:
            return
        time.sleep(0.25)
        left = _descendants(os.getpid())
    print("\nprocesses left running by the tests:\n" + "\n".join(f"  {p}: {c[:160]}" for p, c in left))
    session.exitstatus = 1


def chat_server(answers: list[str], seen: list[dict] | None = None):
    """A real local HTTP server speaking chat completions: records each request's JSON in ``seen`` (if given) and
    replays ``answers`` (message contents) in order, then ``{}``. The tests of ``--llm`` talk to it."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    queue = list(answers)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the http.server protocol
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if seen is not None:
                seen.append(request)
            content = queue.pop(0) if queue else "{}"
            body = json.dumps({"choices": [{"message": {"role": "assistant", "content": content},
                                            "finish_reason": "stop"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# A memory-bound CPU workload for the PyTorch profiler (skinny GEMMs of about 3 FLOP/B with element-wise work
# around them): `python -c MEMORY_BOUND_CPU_JOB TRACE.json` writes its trace (tests/profile/test_diagnose_classes.py)
MEMORY_BOUND_CPU_JOB = r'''
import sys, torch
from torch.profiler import ProfilerActivity, profile, schedule
torch.set_num_threads(1)
a, b, bias = torch.randn(2048, 6), torch.randn(6, 2048), torch.randn(2048, 2048)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=0, warmup=1, active=2),
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:
    for _ in range(3):
        for _ in range(3):
            y = torch.relu(a @ b + bias) * 0.5
        prof.step()
'''

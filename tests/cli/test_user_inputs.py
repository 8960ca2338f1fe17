"""What a user meets first (issue 45, point 14): a Hugging Face model folder as -m, a config.json that lost its
model_type, shell completion, the quick start's outputs ignored by git, and the PyTorch install a real run names."""

import json
import subprocess
import sys

from conftest import DEEPSEEK_V3_CONFIG, REPO, assert_one_line_error, run_cli

JOB = ["-c", "dgx-h100-8node", "-b", "256", "-s", "4096", "-S", "tp8 pp2", "--json"]


def test_model_folder_reads_its_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V3_CONFIG))
    (tmp_path / "model.safetensors.index.json").write_text("{}")  # a snapshot holds more than its config
    by_folder = run_cli("estimate", "-m", tmp_path, *JOB)
    by_file = run_cli("estimate", "-m", tmp_path / "config.json", *JOB)
    assert by_folder.returncode == 0, by_folder.stderr
    assert json.loads(by_folder.stdout)["step_time_s"] == json.loads(by_file.stdout)["step_time_s"]


def test_folder_without_config_json(tmp_path):
    assert_one_line_error(run_cli("estimate", "-m", tmp_path, *JOB), "model", "without a config.json")


def test_config_json_without_model_type(tmp_path):
    cfg = {k: v for k, v in DEEPSEEK_V3_CONFIG.items() if k != "model_type"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    for where in (tmp_path, tmp_path / "config.json"):
        assert_one_line_error(run_cli("estimate", "-m", where, *JOB), "model.model_type", "has no model_type",
                              "deepseek_v3")
    renamed = tmp_path / "deepseek.json"  # the same keys under another name: still said
    renamed.write_text(json.dumps(cfg))
    assert_one_line_error(run_cli("estimate", "-m", renamed, *JOB), "model.model_type")


def test_shell_completion():
    """Typer's completion: --show-completion prints the script; the script's protocol completes commands and an
    option's choices."""
    import os

    def asap(*args, **env):
        return subprocess.run([sys.executable, "-c", "from asap.cli import main; main()", *args], capture_output=True,
                              text=True, timeout=120, env={**os.environ, **env})

    # the shell named, not detected from the parent process (a test's parent is Python, not a shell)
    shown = asap("--show-completion", "bash", _TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1")
    assert shown.returncode == 0 and "complete -o default -F _asap_completion asap" in shown.stdout, shown.stderr

    def complete(words, cword):
        return asap(_ASAP_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=str(cword)).stdout.split()

    assert complete("asap es", 1) == ["estimate"]
    assert complete("asap tune --executor torcht", 3) == ["torchtitan"]
    assert complete("asap emit -f megatron-", 3) == ["megatron-bridge"]


def test_quick_start_outputs_are_ignored():
    for name in ("tune.html", "tune-cluster.yaml", "tune-memory.sqlite"):
        proc = subprocess.run(["git", "check-ignore", "-q", name], cwd=REPO, timeout=60)
        assert proc.returncode == 0, f"{name} is not in .gitignore"


def test_real_runs_name_the_cpu_install():
    """Without PyTorch, ``asap run`` and ``asap align`` name the install that works here: the CPU build of the
    version the README's quick start installs."""
    hide = "import sys; sys.modules['torch'] = None; from asap.cli import main; main()"
    for args in (["run", "-m", "tiny-dense", "-S", "dp=1", "-b", "2", "-s", "16", "--steps", "1"],
                 ["align", "-m", "tiny-dense", "--a", "dp=1", "--b", "dp=1", "-b", "2", "-s", "16"]):
        proc = subprocess.run([sys.executable, "-c", hide, *args], capture_output=True, text=True, timeout=120)
        assert_one_line_error(proc, "real runs need PyTorch", "pip install torch==2.13.0", "whl/cpu")
    script = REPO / "scripts" / "test.sh"  # the quick start's install (README: its second command)
    assert "torch==2.13.0" in (script.read_text() if script.exists() else (REPO / "README.md").read_text())

"""``asap tune --executor command --framework F --launch TEMPLATE``: the emitted config per trial, the stack's
log parser, and failed trials (a real hang killed with its process group, a real allocation failure) recorded
with their reasons while the loop goes on. Fast: the launched program is a small script, not a stack."""

import json
import sqlite3
import sys
import textwrap
from pathlib import Path

from asap.errors import AsapError
from asap.execute.launch import launch_argv, parse_variables

LOGS = Path(__file__).parents[1] / "data" / "stack_logs"

SCRIPT = textwrap.dedent('''
    import sys, time
    trial, trial_dir, config = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    assert "[parallelism]" in open(config).read()          # the emitted torchtitan TOML of this trial
    if trial == 1:                                          # a run that trains: torchtitan's own lines
        sys.stdout.write(open(sys.argv[4]).read())
    elif trial == 2:                                        # a hang: killed after --trial-timeout
        time.sleep(600)
    else:                                                   # out of memory: a real failed allocation
        bytearray(1 << 50)
''')


def test_command_executor_through_the_cli(cli, tmp_path):
    script = tmp_path / "fake_stack.py"
    script.write_text(SCRIPT)
    db = tmp_path / "m.db"
    launch = f"{sys.executable} {script} {{trial}} {{trial_dir}} {{config}} {LOGS / 'torchtitan-0.2.2-cpu-fsdp.log'}"
    p = cli("tune", "-m", "tiny-dense", "-c", "local-cpu", "--devices", "2", "-b", "8", "-s", "64",
            "--executor", "command", "--framework", "torchtitan", "--launch", launch, "--trial-timeout", "8",
            "--budget", "3", "--memory", db, "--profile", tmp_path / "trials", "--json", timeout=600)
    assert p.returncode == 0, p.stderr
    trials = json.loads(p.stdout)["trials"]
    assert [t["status"] for t in trials] == ["ok", "failed", "failed"]
    # step 1 is the warm-up; steps 2 and 3 (slowest ranks: tps 404 and 229) -> the median
    assert trials[0]["measured_step_time_s"] == (512 / (2 * 404) + 512 / (2 * 229)) / 2
    assert "timed out after 8 s" in trials[1]["reason"] and "process group was killed" in trials[1]["reason"]
    assert trials[2]["reason"].startswith("out of memory") and "MemoryError" in trials[2]["reason"]
    with sqlite3.connect(db) as con:
        rows = con.execute("select status, measured_step_time_s, reason from trials order by id").fetchall()
        results = [json.loads(r[0]) for r in con.execute(
            "select outputs from audit where agent='executor' and step='result' order by id")]
    assert [r[0] for r in rows] == ["ok", "failed", "failed"] and rows[0][1] == trials[0]["measured_step_time_s"]
    assert "step:  2  loss:  6.68290" in results[0]["details"]["log_tail"]      # Memory keeps the log
    assert results[1]["kind"] == "timeout" and results[2]["kind"] == "oom"
    assert (tmp_path / "trials" / "trial1" / "torchtitan.toml").is_file()


def test_command_needs_a_template_and_a_format(cli):
    from tests.conftest import assert_one_line_error

    base = ("tune", "-m", "tiny-dense", "-c", "local-cpu", "--devices", "2", "-b", "8", "-s", "64")
    assert_one_line_error(cli(*base, "--executor", "command"), "launch")
    assert_one_line_error(cli(*base, "--executor", "command", "--launch", "echo {tp}"), "framework")
    assert_one_line_error(cli(*base, "--executor", "torchtitan", "--framework", "megatron"), "framework")
    assert_one_line_error(cli(*base, "--executor", "command", "--framework", "megatron", "--launch", "x {nope}"),
                          "placeholder")
    assert_one_line_error(cli(*base, "--executor", "command", "--framework", "megatron", "--launch", "x",
                              "--launcher", "mpirun"), "launcher")


def test_presets():
    assert launch_argv("local", "python pretrain_gpt.py {emitted_args}") == ["python", "pretrain_gpt.py",
                                                                            "{emitted_args}"]
    srun = launch_argv("srun", "pretrain_gpt.py {emitted_args}")
    assert srun[:6] == ["srun", "--nodes", "{nodes}", "--ntasks-per-node", "1", "--kill-on-bad-exit=1"]
    assert srun[6:8] == ["torchrun", "--nnodes"] and srun[-2:] == ["pretrain_gpt.py", "{emitted_args}"]
    assert parse_variables(["partition=gpu", "nodes=4"]) == {"partition": "gpu", "nodes": "4"}
    try:
        parse_variables(["4=x"])
    except AsapError as e:
        assert "var" in str(e)
    else:
        raise AssertionError("a bad --var was accepted")


def test_megatron_arguments_spliced(tmp_path):
    """``{emitted_args}`` becomes Megatron's emitted arguments, one argv entry each, and Megatron's own line
    (as the ModelLink README quotes it) is parsed."""
    from asap import Job, TrainSpec, load_cluster, load_model
    from asap.execute.factory import make_executor

    echo = tmp_path / "megatron.py"
    echo.write_text("import sys, json; json.dump(sys.argv[1:], open(sys.argv[1], 'w'))\n"
                    "print(' iteration  2/ 3 | elapsed time per iteration (ms):  52728.1 | lm loss:  1.376514E+01 |')\n"
                    "print(' iteration  3/ 3 | elapsed time per iteration (ms):  52000.0 | lm loss:  1.3E+01 |')\n")
    m, c = load_model("tiny-dense"), load_cluster("local-cpu", devices=2)
    ex = make_executor("command", template=[sys.executable, str(echo), str(tmp_path / "argv.json"),
                                            "{emitted_args}"], framework="megatron",
                       job=Job.resolve(m, c, TrainSpec(8, 64, "bf16", "megatron")), workdir=str(tmp_path / "w"))
    r = ex.run(ex.parse("tp=2"))
    assert r.ok, r.reason
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert "--tensor-model-parallel-size" in argv and argv[argv.index("--tensor-model-parallel-size") + 1] == "2"
    assert r.step_time_s == 52.0 and r.losses == [13.76514, 13.0]

"""Measured runs in the Sharding Memory: the schema migration of an older file in place, ``asap learn --cases`` on
a real case file (provenance, duplicates refused), a stack's real log read into a run, a text that is not a
training log refused in one line, ``asap memory`` listing them."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from asap.errors import AsapError
from asap.learn import job_of, learn_cases, learn_log, read_log, strategy_of
from asap.memory import MIGRATIONS, SCHEMA_VERSION, Memory
from asap.spec.hardware import load_cluster
from asap.spec.job import Job
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference"
if not REFERENCE.exists():
    REFERENCE = Path("/work/shared/reference")
ASAP = [sys.executable, "-c", "import sys; from asap.cli import main; sys.exit(main())"]
LOGS = Path(__file__).resolve().parents[1] / "data" / "stack_logs"


def _old_file(path: Path) -> None:
    """A memory file as schema version 2 wrote it, with one experiment and one finished trial."""
    conn = sqlite3.connect(path, isolation_level=None)
    for sql in MIGRATIONS[:2]:
        for statement in sql.split(";"):
            if statement.strip():
                conn.execute(statement)
    conn.execute("PRAGMA user_version = 2")
    conn.execute("INSERT INTO experiments (workload_key, workload, created_at) VALUES ('k', '{\"model\": \"m\"}', "
                 "'2026-01-01T00:00:00+00:00')")
    conn.execute("INSERT INTO trials (experiment_id, strategy_string, strategy, status, measured_step_time_s, "
                 "started_at) VALUES (1, 'tp=2', '{\"tp\": 2}', 'ok', 1.5, '2026-01-01T00:00:00+00:00')")
    conn.close()


def test_an_old_file_upgrades_in_place_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.sqlite"
    _old_file(path)
    assert SCHEMA_VERSION == 3
    with Memory.open(path) as mem:
        assert mem.schema_version == 3
        assert [e.workload for e in mem.experiments()] == [{"model": "m"}]
        assert [(t.strategy_string, t.measured_step_time_s) for t in mem.trials()] == [("tp=2", 1.5)]
        assert mem.measured_runs() == []
    cols = {r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(measured_runs)")}
    assert {"run_key", "source_kind", "source_file", "source_ref", "measured_at", "step_time_spread_s",
            "peak_memory_gb"} <= cols


def test_learn_cases_stores_every_case_with_its_provenance_and_refuses_it_twice(tmp_path):
    cases = REFERENCE / "fp4_runs_2025.json"
    n = len(json.loads(cases.read_text()))
    with Memory.open(tmp_path / "m.sqlite") as mem:
        first = learn_cases(mem, cases)
        assert len(first.added) == n and not first.refused
        again = learn_cases(mem, cases)
        assert not again.added and len(again.refused) == n
        assert "duplicates are refused" in again.refused[0]["reason"]
        rows = mem.measured_runs()
    assert len(rows) == n
    case = json.loads(cases.read_text())[0]
    r = rows[0]
    assert (r.source_kind, r.source_file, r.source_ref) == ("case", str(cases), case["id"])
    assert r.measured_step_time_s == case["published"]["step_time_s"]
    assert r.added_at.startswith("20")
    # the stored job and strategy read back into the job the cost model prices
    job = job_of(r.job)
    assert job.framework.name == r.stack and job.devices == r.devices
    assert strategy_of(job, r.strategy).to_dict() == r.strategy


def _tiny_job() -> Job:
    return Job.resolve(load_model("tiny-dense"), load_cluster("local-cpu", devices=2),
                       TrainSpec(8, 64, "fp32", "torchtitan"))


def test_a_real_torchtitan_log_gives_its_median_step_after_warmup_and_peak_memory(tmp_path):
    job = _tiny_job()
    text = (LOGS / "torchtitan-0.2.2-cpu-fsdp.log").read_text()
    steps = read_log("torchtitan", text, job, "log")
    # steps 1..3 at 512 / (2 x slowest rank's tps); step 1 is the warm-up: the median of steps 2 and 3
    assert steps.steps == 2
    assert steps.step_time_s == pytest.approx((512 / (2 * 404) + 512 / (2 * 229)) / 2)
    assert steps.spread_s == pytest.approx(abs(512 / (2 * 229) - 512 / (2 * 404)) / 2)
    assert steps.peak_memory_gb == max(float(m) for m in re.findall(r"memory:  ([0-9.]+)GiB", text))
    with Memory.open(tmp_path / "m.sqlite") as mem:
        stored = learn_log(mem, job, strategy_of(job, {"dp": 2, "zero": 3}), LOGS / "torchtitan-0.2.2-cpu-fsdp.log",
                           cluster_spec={"accelerator": "local-cpu", "devices_per_node": 2, "nodes": 1})
        row = mem.measured_runs()[0]
        with pytest.raises(AsapError, match="duplicates are refused"):
            learn_log(mem, job, strategy_of(job, {"dp": 2, "zero": 3}), LOGS / "torchtitan-0.2.2-cpu-fsdp.log",
                      cluster_spec={"accelerator": "local-cpu", "devices_per_node": 2, "nodes": 1})
    assert row.source_kind == "log" and row.source_ref.endswith("torchtitan-0.2.2-cpu-fsdp.log")
    assert row.measured_step_time_s == stored["measured_step_time_s"] and row.steps == 2


def test_a_file_that_is_not_a_training_log_is_refused_in_one_line(tmp_path):
    with pytest.raises(AsapError) as e:
        read_log("torchtitan", (LOGS / "README.md").read_text(), _tiny_job(), "README.md")
    assert str(e.value) == "log: README.md is not a torchtitan training log (no step-time line like the stack prints)"


def test_asap_learn_and_memory_list_the_runs(tmp_path):
    db = tmp_path / "m.sqlite"
    cases = REFERENCE / "fp4_runs_2025.json"
    run = [*ASAP, "learn", "--cases", str(cases), "--memory", str(db), "--json"]
    out = json.loads(subprocess.run(run, capture_output=True, text=True, check=True).stdout)
    assert len(out["added"]) == out["measured_runs"] > 0
    again = subprocess.run(run, capture_output=True, text=True, check=True)
    assert json.loads(again.stdout)["added"] == [] and "refused" in again.stderr
    listed = subprocess.run([*ASAP, "memory", "--memory", str(db), "--json"],
                            capture_output=True, text=True, check=True)
    runs = json.loads(listed.stdout)["measured_runs"]
    assert [r["source_ref"] for r in runs] == [c["id"] for c in json.loads(cases.read_text())]
    bad = subprocess.run([*ASAP, "learn", "--memory", str(db)], capture_output=True,
                         text=True)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1


def test_estimate_with_memory_names_the_runs_and_factors_and_without_it_is_unchanged(tmp_path):
    """The four fp4 runs learned; an nvfp4 job on GB200 with Megatron-LM: the JSON names the runs and the factors
    that moved, the step moves exactly when a factor did, and the runs narrow the 80% interval; without --memory
    the same estimate and no new keys."""
    db = tmp_path / "m.sqlite"
    subprocess.run([*ASAP, "learn", "--cases", str(REFERENCE / "fp4_runs_2025.json"), "--memory", str(db)],
                   capture_output=True, text=True, check=True)
    job = ["estimate", "-m", "llama3-8b", "-c", "gb200", "--devices", "8", "-b", "32", "-s", "8192",
           "--precision", "nvfp4", "--framework", "megatron", "-S", "tp1 mbs2", "--json"]
    plain = json.loads(subprocess.run([*ASAP, *job], capture_output=True, text=True, check=True).stdout)
    learned = json.loads(subprocess.run([*ASAP, *job, "--memory", str(db)], capture_output=True, text=True,
                                        check=True).stdout)
    assert "learned_from" not in plain and "corrections" not in plain
    assert learned["learned_from"] == [1, 2, 3, 4]
    assert isinstance(learned["corrections"], dict)
    assert (learned["step_time_s"] != plain["step_time_s"]) == bool(learned["corrections"])

    def width(d):
        return (d["step_time_range_s"][1] - d["step_time_range_s"][0]) / d["step_time_s"]
    assert width(learned) < width(plain)


def test_validate_with_memory_moves_the_fp4_rate_no_shipped_run_fitted_and_not_the_fitted_kernels(tmp_path):
    """docs/learn.md's worked example: three nvfp4 runs of fp4_runs_2025.json in, the fourth validated. Blackwell's
    fp4 GEMM rate was fitted on no shipped run (full prior width): it takes the runs' error; its attention and
    streaming kernels were (the shipped bf16 and fp8 runs: FITTED_KERNEL_PRIOR): they stay at the catalog."""
    examples = Path(__file__).resolve().parents[2] / "docs" / "examples" / "learn"
    db = tmp_path / "fp4.sqlite"
    subprocess.run([*ASAP, "learn", "--cases", str(examples / "three_fp4.json"), "--memory", str(db)],
                   capture_output=True, text=True, check=True)
    run = [*ASAP, "validate", "--cases", str(examples / "fourth_fp4.json"), "--json"]
    plain = json.loads(subprocess.run(run, capture_output=True, text=True, check=True).stdout)
    learned = json.loads(subprocess.run([*run, "--memory", str(db)], capture_output=True, text=True,
                                        check=True).stdout)
    case = learned["cases"][0]
    assert case["learned_from"] == [1, 2, 3]
    assert case["corrections"]["fp8_gemm"] > 1.01  # the runs are slower than priced: the fp4 rate slows (x1.019)
    assert "attention" not in case["corrections"] and "memory_bound" not in case["corrections"]
    assert abs(case["error"]) < abs(plain["cases"][0]["error"])


def test_asap_learn_job_reads_the_stacks_config_and_its_log(tmp_path):
    """The torchtitan config ``asap emit`` writes for the logged run (tiny-dense dp=2 zero=3 -b 8 -s 64 fp32 on 2
    CPU processes) read back by ``read_job``, the real log beside it: one measured run, the median after warm-up;
    the same config with a file that is no training log: one line, non-zero exit."""
    cfg = tmp_path / "tt.toml"
    emitted = subprocess.run([*ASAP, "emit", "-f", "torchtitan", "-m", "tiny-dense", "-c", "local-cpu", "--devices",
                              "2", "-b", "8", "-s", "64", "--precision", "fp32", "-S", "dp=2,zero=3"],
                             capture_output=True, text=True, check=True)
    cfg.write_text(emitted.stdout)
    db = str(tmp_path / "m.sqlite")
    log = LOGS / "torchtitan-0.2.2-cpu-fsdp.log"
    out = subprocess.run([*ASAP, "learn", "--job", str(cfg), "--log", str(log), "--cluster", "local-cpu",
                          "--memory", db, "--json"], capture_output=True, text=True, check=True)
    added = json.loads(out.stdout)["added"][0]
    assert added["steps"] == 2 and added["measured_step_time_s"] == pytest.approx((512 / 808 + 512 / 458) / 2)
    with Memory.open(db) as mem:
        row = mem.measured_runs()[0]
    assert (row.stack, row.devices, row.source_file, row.strategy["zero"]) == ("torchtitan", 2, str(cfg), 3)
    bad = subprocess.run([*ASAP, "learn", "--job", str(cfg), "--log", str(LOGS / "README.md"), "--cluster",
                          "local-cpu", "--memory", db], capture_output=True, text=True)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1
    assert "is not a torchtitan training log" in bad.stderr


def test_a_stored_run_keeps_the_kernels_its_config_compiled(tmp_path):
    """A torchtitan config that compiles the loss alone (its DeepSeek-V3 16B example's ``components = ["loss"]``)
    learned with a real log: the stored job keeps ``fused_elementwise`` false and ``compiled_loss`` true, and reads
    back into the same train spec, so the learned run is re-priced with the kernels it ran; a default job stores
    neither key. A non-boolean is refused naming the field."""
    from asap.memory.runs import job_document

    cfg = tmp_path / "tt.toml"
    emitted = subprocess.run([*ASAP, "emit", "-f", "torchtitan", "-m", "tiny-dense", "-c", "local-cpu", "--devices",
                              "2", "-b", "8", "-s", "64", "--precision", "fp32", "-S", "dp=2,zero=3"],
                             capture_output=True, text=True, check=True)
    cfg.write_text(emitted.stdout.replace("[compile]\nenable = false", '[compile]\nenable = true\ncomponents = ["loss"]'))
    db = str(tmp_path / "m.sqlite")
    subprocess.run([*ASAP, "learn", "--job", str(cfg), "--log", str(LOGS / "torchtitan-0.2.2-cpu-fsdp.log"),
                    "--cluster", "local-cpu", "--memory", db, "--json"], capture_output=True, text=True, check=True)
    with Memory.open(db) as mem:
        row = mem.measured_runs()[0]
    assert (row.job["train"]["fused_elementwise"], row.job["train"]["compiled_loss"]) == (False, True)
    train = job_of(row.job).train
    assert (train.fused_elementwise, train.compiled_loss) == (False, True)
    plain = Job.from_names("tiny-dense", "local-cpu", 8, 64, "fp32", framework="torchtitan", devices=2)
    assert not {"fused_elementwise", "compiled_loss"} & set(job_document(plain)["train"])
    with pytest.raises(AsapError) as e:
        TrainSpec.from_dict({"global_batch": 8, "seq_len": 64, "compiled_loss": "yes"})
    assert e.value.field == "train.compiled_loss"

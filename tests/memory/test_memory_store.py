"""The Sharding Memory (asap.memory) on real SQLite files, with real writer processes, and ``asap memory``.

Nothing is mocked; concurrency and kills are arranged by construction (the writers wait for one "go" line, the
victim says "ready" only after its trial is committed), never by sleeping and hoping."""

import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone

import pytest

from asap.memory import (KILLED_REASON, SCHEMA_VERSION, Memory, canonical_strategy, default_memory_path,
                                workload_key)
from asap.errors import AsapError
from asap.spec.strategy import RecomputePolicy
from conftest import REPO, assert_one_line_error

WORKLOAD = {"model": "llama3-8b", "model_family": "llama", "params": 8.0e9, "accelerator": "h100-sxm",
            "accelerator_family": "gpu", "devices": 64, "global_batch": 512, "seq_len": 8192, "precision": "bf16",
            "framework": "megatron"}


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    return env


def spawn(code: str, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())


def test_default_path_follows_asap_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ASAP_DATA_DIR", str(tmp_path / "data"))
    assert default_memory_path() == tmp_path / "data" / "memory.sqlite"
    with Memory.open() as mem:  # the folder is created
        assert mem.path == tmp_path / "data" / "memory.sqlite"
        assert mem.experiments() == []
    assert (tmp_path / "data" / "memory.sqlite").is_file()


def test_round_trip_and_pragmas(tmp_path):
    path = tmp_path / "sub" / "m.sqlite"
    with Memory.open(path) as mem:
        assert mem.schema_version == SCHEMA_VERSION
        assert mem.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert mem.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert mem.conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000

        eid = mem.experiment(WORKLOAD)
        assert mem.experiment(dict(reversed(list(WORKLOAD.items())))) == eid  # get, not create
        other = mem.experiment({**WORKLOAD, "devices": 128})
        assert other != eid

        t1 = mem.begin_trial(eid, "tp=2,dp=4,layer_split=5/4/4/3,pp=4", predicted_step_time_s=1.5, executor="sim",
                             diagnosis={"bottleneck": "compute"})
        row = mem.trial(t1)
        assert row.status == "running" and row.pid == os.getpid() and row.host == socket.gethostname()
        assert row.strategy_string == "dp=4,layer_split=5/4/4/3,pp=4,tp=2"
        assert row.keys == {"dp": 4, "layer_split": "5/4/4/3", "pp": 4, "tp": 2}
        assert row.ended_at is None
        mem.finish_trial(t1, "ok", measured_step_time_s=1.25, traces=["/tmp/a.json"])
        t2 = mem.begin_trial(eid, {"tp": 8, "recompute": "full"}, executor="sim")
        mem.finish_trial(t2, "failed", reason="out of memory", diagnosis={"oom": True})
        t3 = mem.begin_trial(eid, "tp=4")
        mem.finish_trial(t3, "skipped", reason="predicted slower")

        got = mem.trial(t1)
        assert (got.status, got.measured_step_time_s, got.predicted_step_time_s) == ("ok", 1.25, 1.5)
        assert got.diagnosis == {"bottleneck": "compute"}  # kept: finish gave none
        assert got.traces == ["/tmp/a.json"] and got.ended_at
        assert mem.trial(t2).reason == "out of memory" and mem.trial(t2).diagnosis == {"oom": True}
        # typed rows: each strategy completed once, on its experiment's devices (64) and framework (megatron)
        assert (got.strategy.dp, got.strategy.tp, got.strategy.pp, got.strategy.layer_split) == (4, 2, 4, (5, 4, 4, 3))
        assert mem.trial(t3).strategy.dp == 16 and mem.trial(t3).keys == {"tp": 4}
        assert mem.trial(t2).strategy.recompute == RecomputePolicy.parse("full")
        assert mem.trial(t1).to_dict()["strategy"] == {"dp": 4, "layer_split": "5/4/4/3", "pp": 4, "tp": 2}

        assert mem.has_strategy(eid, "pp=4,tp=2,layer_split=5/4/4/3,dp=4")  # reordered keys
        assert mem.has_strategy(eid, {"recompute": "full", "tp": "8"})  # failed counts too
        assert not mem.has_strategy(eid, "tp=4")  # skipped does not
        assert not mem.has_strategy(other, "dp=4,tp=2,pp=4,layer_split=5/4/4/3")  # another experiment

        a = mem.log(eid, "proposer", "propose", inputs={"diagnosis": "compute"}, retrieved=["k:tp-overlap", "m:1"],
                    candidates=[{"strategy": "tp=2", "kept": True, "why": "fastest predicted"},
                                {"strategy": "tp=16", "kept": False, "why": "does not fit"}],
                    outputs={"proposals": ["tp=2"]}, trial_id=t1)
        b = mem.log(other, "coordinator", "stop")

        assert [t.id for t in mem.trials(eid)] == [t1, t2, t3]
        assert [t.id for t in mem.trials()] == [t1, t2, t3]
        assert [e.id for e in mem.experiments()] == [eid, other]
        assert mem.experiments()[0].workload["params"] == 8_000_000_000
        assert mem.experiments()[0].workload_key == workload_key(WORKLOAD)
        audit = mem.audit(eid)
        assert [r["id"] for r in audit] == [a]
        assert audit[0]["candidates"][1] == {"strategy": "tp=16", "kept": False, "why": "does not fit"}
        assert audit[0]["retrieved"] == ["k:tp-overlap", "m:1"] and audit[0]["trial_id"] == t1
        assert [r["id"] for r in mem.audit()] == [a, b]

        exported = mem.export()
        assert set(exported) == {"experiments", "trials", "audit", "measured_runs"}
        assert len(exported["experiments"]) == 2 and len(exported["trials"]) == 3 and len(exported["audit"]) == 2
        json.dumps(exported, allow_nan=False)  # JSON-serialisable as is

    with Memory.open(path) as mem:  # all of it is in the file
        assert mem.export() == exported


def test_bad_arguments_name_their_field(tmp_path):
    with Memory.open(tmp_path / "m.sqlite") as mem:
        eid = mem.experiment(WORKLOAD)
        with pytest.raises(AsapError) as e:
            mem.begin_trial(eid + 100, "tp=2")
        assert e.value.field == "experiment"
        with pytest.raises(AsapError) as e:
            mem.begin_trial(eid, "tp=two")
        assert e.value.field.startswith("strategy")
        tid = mem.begin_trial(eid, "tp=2")
        with pytest.raises(AsapError) as e:
            mem.finish_trial(tid, "great")
        assert e.value.field == "status"
        with pytest.raises(AsapError) as e:
            mem.finish_trial(tid + 100, "ok")
        assert e.value.field == "trial"
        with pytest.raises(AsapError) as e:
            mem.trial(tid + 100)
        assert e.value.field == "trial"
        assert mem.trial(tid).status == "running"


def test_strategy_strings_are_canonical():
    assert canonical_strategy("tp=2,dp=4")[0] == canonical_strategy("dp=4,tp=2")[0] == "dp=4,tp=2"
    assert canonical_strategy({"tp": "2", "dp": 4})[0] == "dp=4,tp=2"
    assert canonical_strategy("")[0] == ""


def test_similar_experiments(tmp_path):
    with Memory.open(tmp_path / "m.sqlite") as mem:
        me = mem.experiment(WORKLOAD)
        near = mem.experiment({**WORKLOAD, "model": "llama3-13b", "params": 13e9, "devices": 128})
        mid = mem.experiment({**WORKLOAD, "model": "qwen2-7b", "model_family": "qwen2", "params": 7e9,
                              "accelerator": "tpu-v5p", "accelerator_family": "tpu"})
        far = mem.experiment({"model": "gpt2", "model_family": "gpt2", "params": 1.2e8, "accelerator": "tpu-v4",
                              "accelerator_family": "tpu", "devices": 2, "global_batch": 8, "seq_len": 1024})
        ranked = mem.similar_experiments(WORKLOAD, k=5)
        ids = [e.id for e, _ in ranked]
        assert me not in ids  # not itself
        assert ids[:2] == [near, mid]
        scores = [s for _, s in ranked]
        assert all(0.0 <= s <= 1.0 for s in scores) and scores == sorted(scores, reverse=True)
        assert far not in ids or dict((e.id, s) for e, s in ranked)[far] < scores[1]
        assert len(mem.similar_experiments(WORKLOAD, k=1)) == 1
        # the identical workload of another framework scores 1
        assert mem.similar_experiments({**WORKLOAD, "framework": "torchtitan"}, k=1)[0] == \
            (mem.experiments()[0], 1.0)


WRITER = """
    import sys
    from asap.memory import Memory
    path, name = sys.argv[1], sys.argv[2]
    with Memory.open(path) as mem:
        eid = mem.experiment({"model": "tiny-dense", "accelerator": "local-cpu", "devices": 4, "global_batch": 8,
                              "seq_len": 128, "precision": "fp32", "framework": "megatron"})
        print("ready", flush=True)
        assert sys.stdin.readline().strip() == "go"
        for i in range(50):
            tid = mem.begin_trial(eid, f"mbs={i + 1},tp=1", predicted_step_time_s=0.1, executor=name)
            mem.finish_trial(tid, "ok", measured_step_time_s=0.1 + i / 1000)
            mem.log(eid, name, f"trial-{i}", trial_id=tid)
    print("done", flush=True)
"""


def test_two_writer_processes_at_once(tmp_path):
    path = tmp_path / "shared.sqlite"
    procs = [spawn(WRITER, path, name) for name in ("writer-a", "writer-b")]
    try:
        for p in procs:  # both opened the file and wait
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            assert out.strip() == "done" and "Error" not in err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    with Memory.open(path) as mem:
        assert len(mem.experiments()) == 1  # both found the same experiment
        trials = mem.trials()
        assert len(trials) == 100 and all(t.status == "ok" for t in trials)
        for name in ("writer-a", "writer-b"):
            mine = [t for t in trials if t.executor == name]
            assert sorted(t.strategy_string for t in mine) == sorted(f"mbs={i + 1},tp=1" for i in range(50))
        assert len(mem.audit()) == 100


VICTIM = """
    import sys, time
    from asap.memory import Memory
    mem = Memory.open(sys.argv[1])
    eid = mem.experiment({"model": "tiny-moe", "accelerator": "local-cpu", "devices": 4})
    done = mem.begin_trial(eid, "tp=2", executor="torch")
    mem.finish_trial(done, "ok", measured_step_time_s=0.5)
    mem.log(eid, "coordinator", "start", inputs={"budget": 3}, trial_id=done)
    running = mem.begin_trial(eid, "tp=4", predicted_step_time_s=0.4, executor="torch")
    print("ready", done, running, flush=True)
    time.sleep(600)
"""


def test_a_killed_writer_loses_nothing_and_its_trial_is_marked_killed(tmp_path):
    path = tmp_path / "m.sqlite"
    p = spawn(VICTIM, path)
    try:
        line = p.stdout.readline().split()
        assert line[0] == "ready", p.stderr.read()
        done, running = int(line[1]), int(line[2])
        with Memory.open(path) as mem:  # while it lives, its trial stays running
            assert mem.recovered == []
            assert mem.trial(running).status == "running" and mem.trial(running).pid == p.pid
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)  # reaped: its pid is no longer alive
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == -signal.SIGKILL
    with Memory.open(path) as mem:
        assert mem.recovered == [running]
        t = mem.trial(running)
        assert t.status == "killed" and t.reason == KILLED_REASON and t.ended_at
        assert t.predicted_step_time_s == 0.4
        first = mem.trial(done)
        assert first.status == "ok" and first.measured_step_time_s == 0.5
        audit = mem.audit()
        assert len(audit) == 1 and audit[0]["inputs"] == {"budget": 3} and audit[0]["trial_id"] == done
        assert not mem.has_strategy(t.experiment_id, "tp=4")  # killed: the loop may run it again
        assert mem.has_strategy(t.experiment_id, "tp=2")
    with Memory.open(path) as mem:
        assert mem.recovered == []  # once


def test_recover_trials_of_other_hosts_only_when_stale(tmp_path):
    path = tmp_path / "m.sqlite"
    with Memory.open(path) as mem:
        eid = mem.experiment(WORKLOAD)
        mine = mem.begin_trial(eid, "tp=1")  # this live process: untouched
        fresh = mem.begin_trial(eid, "tp=2")
        stale = mem.begin_trial(eid, "tp=4")
    old = (datetime.now(timezone.utc) - timedelta(days=2)).isoformat()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE trials SET host = 'elsewhere', pid = 1 WHERE id IN (?, ?)", (fresh, stale))
        conn.execute("UPDATE trials SET started_at = ? WHERE id = ?", (old, stale))
    conn.close()
    with Memory.open(path) as mem:
        assert mem.recovered == [stale]
        assert [mem.trial(t).status for t in (mine, fresh, stale)] == ["running", "running", "killed"]


# the version-1 schema, written out by hand as an old asap would have left it
V1_SCHEMA = """
CREATE TABLE experiments (
    id INTEGER PRIMARY KEY AUTOINCREMENT, workload_key TEXT NOT NULL UNIQUE, workload TEXT NOT NULL,
    created_at TEXT NOT NULL);
CREATE TABLE trials (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    experiment_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
    strategy_string TEXT NOT NULL, strategy TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'ok', 'failed', 'skipped', 'killed')),
    reason TEXT NOT NULL DEFAULT '', predicted_step_time_s REAL, measured_step_time_s REAL, diagnosis TEXT,
    executor TEXT NOT NULL DEFAULT '', pid INTEGER, host TEXT, started_at TEXT NOT NULL, ended_at TEXT);
CREATE INDEX trials_by_experiment ON trials(experiment_id, strategy_string);
PRAGMA user_version = 1;
"""


def test_a_version_1_file_is_upgraded_with_its_rows(tmp_path):
    path = tmp_path / "v1.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(V1_SCHEMA)
    conn.execute("INSERT INTO experiments (workload_key, workload, created_at) VALUES (?, ?, ?)",
                 (workload_key(WORKLOAD), json.dumps(WORKLOAD), "2024-01-01T00:00:00+00:00"))
    conn.execute("INSERT INTO trials (experiment_id, strategy_string, strategy, status, measured_step_time_s, "
                 "executor, pid, host, started_at, ended_at) VALUES (1, 'dp=4,tp=2', '{\"dp\": 4, \"tp\": 2}', 'ok', "
                 "2.5, 'sim', 1, 'old-host', '2024-01-01T00:00:01+00:00', '2024-01-01T00:00:09+00:00')")
    conn.commit()
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert "audit" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()

    with Memory.open(path) as mem:
        assert mem.schema_version == SCHEMA_VERSION == 3
        assert mem.experiment(WORKLOAD) == 1  # the old row, found by its key
        (t,) = mem.trials()
        assert t.strategy_string == "dp=4,tp=2" and t.measured_step_time_s == 2.5 and t.status == "ok"
        assert t.traces is None  # the column v2 added
        assert mem.has_strategy(1, "tp=2,dp=4")
        aid = mem.log(1, "analyzer", "diagnose", outputs={"bottleneck": "memory"})  # the table v2 added
        assert mem.audit(1)[0]["id"] == aid
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_a_corrupt_file_is_one_error_naming_memory(tmp_path):
    path = tmp_path / "junk.sqlite"
    path.write_bytes(random.Random(0).randbytes(8192))
    with pytest.raises(AsapError) as e:
        Memory.open(path)
    assert e.value.field == "memory" and "\n" not in str(e.value) and str(path) in str(e.value)


def test_a_newer_or_foreign_database_is_refused(tmp_path):
    newer = tmp_path / "newer.sqlite"
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(AsapError) as e:
        Memory.open(newer)
    assert e.value.field == "memory" and "newer" in str(e.value)

    foreign = tmp_path / "foreign.sqlite"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE songs (title TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(AsapError) as e:
        Memory.open(foreign)
    assert e.value.field == "memory" and "songs" in str(e.value)


def test_cli_memory_json_and_export(tmp_path, cli):
    path = tmp_path / "m.sqlite"
    with Memory.open(path) as mem:
        eid = mem.experiment(WORKLOAD)
        tid = mem.begin_trial(eid, "tp=2,dp=4", predicted_step_time_s=1.0, executor="sim")
        mem.finish_trial(tid, "ok", measured_step_time_s=0.9)
        mem.log(eid, "coordinator", "start", trial_id=tid)
        other = mem.experiment({**WORKLOAD, "devices": 8})

    proc = cli("memory", "--memory", path, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert set(doc) == {"trials", "experiments", "measured_runs"}
    assert [e["id"] for e in doc["experiments"]] == [eid, other]
    (t,) = doc["trials"]
    assert t["strategy_string"] == "dp=4,tp=2" and t["status"] == "ok" and t["measured_step_time_s"] == 0.9

    out = tmp_path / "out" / "export.json"
    proc = cli("memory", "--memory", path, "--experiment", other, "--export", out, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [e["id"] for e in doc["experiments"]] == [other] and doc["trials"] == []
    proc = cli("memory", "--memory", path, "--export", out)
    assert proc.returncode == 0, proc.stderr
    assert "dp4 tp2" in proc.stdout and "wrote" in proc.stdout  # the human table, compact notation
    full = json.loads(out.read_text())
    assert set(full) == {"experiments", "trials", "audit", "measured_runs"}
    assert len(full["audit"]) == 1 and full["audit"][0]["agent"] == "coordinator"

    empty = tmp_path / "new" / "empty.sqlite"  # missing: created empty
    proc = cli("memory", "--memory", empty, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"trials": [], "experiments": [], "measured_runs": []}

    assert_one_line_error(cli("memory", "--memory", path, "--experiment", 99, "--json"), "experiment", "99")
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(random.Random(1).randbytes(4096))
    proc = cli("memory", "--memory", junk, "--json")
    assert proc.returncode == 2
    assert_one_line_error(proc, "memory:", "not an asap memory")

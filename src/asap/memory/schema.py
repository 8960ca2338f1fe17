"""The Sharding Memory's file: its tables (``MIGRATIONS``, one per schema version), the trial statuses, the
write lock's timeout, and where the file lives by default (``default_memory_path``)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from asap.spec.words import FINISHED_STATUSES, TrialStatus

BUSY_TIMEOUT_S = 10.0
STATUSES = tuple(s.value for s in TrialStatus)
FINISHED = tuple(s.value for s in FINISHED_STATUSES)
KILLED_REASON = "the process running it ended before it finished (killed?)"
FOREIGN_HOST_STALE = timedelta(days=1)


# version 1: experiments and trials
_V1 = """
CREATE TABLE experiments (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    workload_key TEXT NOT NULL UNIQUE,
    workload     TEXT NOT NULL,
    created_at   TEXT NOT NULL
);
CREATE TABLE trials (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    experiment_id         INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
    strategy_string       TEXT NOT NULL,
    strategy              TEXT NOT NULL,
    status                TEXT NOT NULL CHECK (status IN ('running', 'ok', 'failed', 'skipped', 'killed')),
    reason                TEXT NOT NULL DEFAULT '',
    predicted_step_time_s REAL,
    measured_step_time_s  REAL,
    diagnosis             TEXT,
    executor              TEXT NOT NULL DEFAULT '',
    pid                   INTEGER,
    host                  TEXT,
    started_at            TEXT NOT NULL,
    ended_at              TEXT
);
CREATE INDEX trials_by_experiment ON trials(experiment_id, strategy_string);
"""

# version 2: the audit trail of agent decisions, and the traces each trial left
_V2 = """
ALTER TABLE trials ADD COLUMN traces TEXT;
CREATE TABLE audit (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    experiment_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
    trial_id      INTEGER REFERENCES trials(id) ON DELETE SET NULL,
    agent         TEXT NOT NULL,
    step          TEXT NOT NULL,
    inputs        TEXT,
    retrieved     TEXT,
    candidates    TEXT,
    outputs       TEXT,
    created_at    TEXT NOT NULL
);
CREATE INDEX audit_by_experiment ON audit(experiment_id);
CREATE INDEX trials_by_status ON trials(status);
"""

# version 3: measured runs (asap learn: published cases, a stack's own logs, tune trials), each with where it came
# from; ``run_key`` (the job, the strategy and the measured step, canonical) refuses the same run twice
_V3 = """
CREATE TABLE measured_runs (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    run_key               TEXT NOT NULL UNIQUE,
    stack                 TEXT NOT NULL,
    accelerator           TEXT NOT NULL,
    accelerator_family    TEXT NOT NULL,
    cluster_name          TEXT NOT NULL DEFAULT '',
    devices               INTEGER NOT NULL CHECK (devices > 0),
    precision             TEXT NOT NULL,
    job                   TEXT NOT NULL,
    strategy              TEXT NOT NULL,
    measured_step_time_s  REAL NOT NULL CHECK (measured_step_time_s > 0),
    step_time_spread_s    REAL,
    steps                 INTEGER,
    peak_memory_gb        REAL,
    source_kind           TEXT NOT NULL CHECK (source_kind IN ('case', 'log', 'trial')),
    source_file           TEXT NOT NULL DEFAULT '',
    source_ref            TEXT NOT NULL DEFAULT '',
    measured_at           TEXT,
    added_at              TEXT NOT NULL,
    trial_id              INTEGER REFERENCES trials(id) ON DELETE SET NULL
);
CREATE INDEX measured_runs_by_stack ON measured_runs(stack, accelerator_family)
"""

# MIGRATIONS[i] takes a file at user_version i to i + 1 (0 is a new, empty file)
MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3)
SCHEMA_VERSION = len(MIGRATIONS)

_JSON_TRIAL = ("strategy", "diagnosis", "traces")
_JSON_AUDIT = ("inputs", "retrieved", "candidates", "outputs")


def default_memory_path() -> Path:
    """``$ASAP_DATA_DIR/memory.sqlite``, else ``memory.sqlite`` in platformdirs' user data folder for asap."""
    base = os.environ.get("ASAP_DATA_DIR")
    if not base:
        from platformdirs import user_data_dir

        base = user_data_dir("asap")
    return Path(base) / "memory.sqlite"

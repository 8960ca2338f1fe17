"""The Sharding Memory: every experiment, trial and agent decision of the tuning loop, kept in SQLite.

One file (``default_memory_path()``: ``$ASAP_DATA_DIR/memory.sqlite``, else the user's data folder from
platformdirs) holds four tables:

- ``experiments``: one row per workload (model, accelerator, devices, batch, sequence length, precision,
  framework), found again by its ``workload_key``;
- ``trials``: one row per strategy tried on an experiment, written ``running`` (with the pid and host that run
  it) and committed before the trial starts, then finished ``ok | failed | skipped | killed``; a trial left
  ``running`` by a process that died is marked ``killed`` the next time the memory is opened (``recover``);
- ``audit``: what each agent step saw and decided (inputs, retrieved knowledge/memory ids, the candidates with
  whether each was kept and why, outputs), so a tuning run can be replayed and explained;
- ``measured_runs`` (schema version 3): step times measured on real machines (``asap learn``: a published case,
  a stack's training log, a tune trial), each with its job, complete strategy, spread and peak memory where known,
  and its provenance (the kind, the file, the case id or log path, the date); the same run twice is refused.
  ``asap.cost.learning`` corrects the cost model's terms from them (``--memory DB`` on estimate, plan, ...).

Concurrency: WAL journal, a busy timeout, and every write in its own ``BEGIN IMMEDIATE`` transaction retried
while the file is locked, so several processes (each with its own connection) can write at once.

Schema versions live in ``PRAGMA user_version``; ``MIGRATIONS[i]`` takes a file from version ``i`` to
``i + 1`` and they run in order inside one transaction when a file is opened. A file that is not SQLite, that
is some other program's SQLite database, or whose version is newer than this code knows raises
``AsapError("memory", ...)``.

Workloads, strategies and audit rows go in as plain, JSON-serialisable mappings (or text); experiments and trials
come out typed (``Experiment``, ``Trial``: a trial's strategy completed once, as it is read), and as mappings
only at the JSON edge (their ``to_dict``, ``Memory.export``); audit rows come out as mappings.

The package: ``schema`` (the tables, their migrations, the statuses, the default path), ``records`` (workloads,
their keys, canonical strategies), ``connection`` (the retried reads and writes, opening and migrating a file),
``rows`` (the typed experiments and trials), ``experiments``, ``trials`` and ``audit`` (each table's methods), ``similarity`` (how alike two workloads are)
and ``store`` (``Memory``, all of them together). Every name is importable from ``asap.memory``.
"""

from asap.memory.records import (KEY_FIELDS, WORKLOAD_FIELDS, canonical_strategy, normalize_workload,
                                        workload_key)
from asap.memory.rows import Experiment, Trial
from asap.memory.runs import SOURCE_KINDS, DuplicateRun, MeasuredRunRow, job_document, run_key, store_run
from asap.memory.schema import (BUSY_TIMEOUT_S, FINISHED, FOREIGN_HOST_STALE, KILLED_REASON, MIGRATIONS,
                                       SCHEMA_VERSION, STATUSES, default_memory_path)
from asap.memory.similarity import workload_similarity
from asap.memory.store import Memory

__all__ = ["BUSY_TIMEOUT_S", "DuplicateRun", "job_document", "store_run", "Experiment", "MeasuredRunRow", "SOURCE_KINDS", "run_key", "FINISHED", "FOREIGN_HOST_STALE", "KEY_FIELDS", "KILLED_REASON",
           "MIGRATIONS", "Memory", "Trial", "SCHEMA_VERSION", "STATUSES", "WORKLOAD_FIELDS", "canonical_strategy", "default_memory_path",
           "normalize_workload", "workload_key", "workload_similarity"]

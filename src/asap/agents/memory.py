"""The Sharding Memory: every experiment, trial and agent decision of the tuning loop, kept in SQLite.

One file (``default_memory_path()``: ``$ASAP_DATA_DIR/memory.sqlite``, else the user's data folder from
platformdirs) holds three tables:

- ``experiments``: one row per workload (model, accelerator, devices, batch, sequence length, precision,
  framework), found again by its ``workload_key``;
- ``trials``: one row per strategy tried on an experiment, written ``running`` (with the pid and host that run
  it) and committed before the trial starts, then finished ``ok | failed | skipped | killed``; a trial left
  ``running`` by a process that died is marked ``killed`` the next time the memory is opened (``recover``);
- ``audit``: what each agent step saw and decided (inputs, retrieved knowledge/memory ids, the candidates with
  whether each was kept and why, outputs), so a tuning run can be replayed and explained.

Concurrency: WAL journal, a busy timeout, and every write in its own ``BEGIN IMMEDIATE`` transaction retried
while the file is locked, so several processes (each with its own connection) can write at once.

Schema versions live in ``PRAGMA user_version``; ``MIGRATIONS[i]`` takes a file from version ``i`` to
``i + 1`` and they run in order inside one transaction when a file is opened. A file that is not SQLite, that
is some other program's SQLite database, or whose version is newer than this code knows raises
``AsapError("memory", ...)``.

Everything goes in and comes out as plain, JSON-serialisable dicts.
"""

from __future__ import annotations

import json
import math
import os
import random
import socket
import sqlite3
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from asap.errors import AsapError

BUSY_TIMEOUT_S = 10.0
STATUSES = ("running", "ok", "failed", "skipped", "killed")
FINISHED = ("ok", "failed", "skipped", "killed")
KILLED_REASON = "the process running it ended before it finished (killed?)"
FOREIGN_HOST_STALE = timedelta(days=1)

# the fields that identify a workload (two runs with the same values are the same experiment)
KEY_FIELDS = ("model", "accelerator", "devices", "global_batch", "seq_len", "precision", "framework")
# every workload field the memory knows (others are kept as given)
WORKLOAD_FIELDS = ("model", "model_family", "params", "accelerator", "accelerator_family", "devices",
                   "global_batch", "seq_len", "precision", "framework")
_ALIASES = {"family": "accelerator_family", "params_count": "params", "num_params": "params",
            "parameters": "params", "model_params": "params"}
_INT_FIELDS = ("devices", "global_batch", "seq_len")


# --- schema -------------------------------------------------------------------------------------------------

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

# MIGRATIONS[i] takes a file at user_version i to i + 1 (0 is a new, empty file)
MIGRATIONS: tuple[str, ...] = (_V1, _V2)
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


# --- helpers ------------------------------------------------------------------------------------------------

def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _dumps(obj: Any, field: str) -> str | None:
    if obj is None:
        return None
    try:
        return json.dumps(obj, sort_keys=True, allow_nan=False, default=_json_default)
    except (TypeError, ValueError) as e:
        raise AsapError(field, f"is not JSON-serialisable ({e})") from None


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return obj.item()
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "to_dict") and callable(obj.to_dict):
        return obj.to_dict()
    raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _float_or_none(v: Any, field: str) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise AsapError(field, f"must be a number of seconds, got {v!r}") from None
    if not math.isfinite(f):
        return None
    return f


def normalize_workload(workload: dict) -> dict:
    """The workload with its fields under their canonical names (``family`` -> ``accelerator_family``,
    ``params_count``/``num_params`` -> ``params``) and counts as integers; other fields are kept as given."""
    if not isinstance(workload, dict):
        raise AsapError("workload", f"must be a mapping, got {type(workload).__name__}")
    out: dict[str, Any] = {}
    for k, v in workload.items():
        key = _ALIASES.get(str(k), str(k))
        if key in out and k != key:
            continue  # the canonical name wins over an alias
        out[key] = v
    for k in _INT_FIELDS:
        if out.get(k) is not None:
            try:
                out[k] = int(out[k])
            except (TypeError, ValueError):
                raise AsapError(f"workload.{k}", f"must be an integer, got {out[k]!r}") from None
    if out.get("params") is not None:
        try:
            p = float(out["params"])
        except (TypeError, ValueError):
            raise AsapError("workload.params", f"must be a number, got {out['params']!r}") from None
        out["params"] = int(p) if p.is_integer() else p
    for k in ("model", "model_family", "accelerator", "accelerator_family", "precision", "framework"):
        if out.get(k) is not None:
            out[k] = str(out[k])
    return out


def workload_key(workload: dict) -> str:
    """A stable key for a workload: the sorted JSON of its identifying fields (model, accelerator, devices,
    global_batch, seq_len, precision, framework; a missing one is null; and ``machine`` when the trials are
    measured somewhere other than the named cluster: the same strategy measured on two sim machines is two
    trials)."""
    w = normalize_workload(workload)
    key = {k: w.get(k) for k in KEY_FIELDS}
    if w.get("machine"):  # where trials are measured, when it is not the cluster itself (the sim's machine file)
        key["machine"] = w["machine"]
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


def canonical_strategy(strategy: str | dict | Any) -> tuple[str, dict]:
    """``(strategy_string, strategy_dict)``: the keys given, parsed and typed, sorted by name, so that
    ``"tp=2,dp=4"`` and ``"dp=4,tp=2"`` are the same string. Not completed (that needs the device count):
    a strategy spelled with every key is a different string from the same one spelled with only a few."""
    from asap.spec.layout import format_layer_split
    from asap.spec.strategy import parse_strategy

    if not isinstance(strategy, (str, dict)) and hasattr(strategy, "to_dict"):  # a Strategy
        strategy = {k: v for k, v in strategy.to_dict().items() if v is not None}
    parsed = parse_strategy(strategy)
    d = {}
    for k, v in sorted(parsed.items()):
        d[k] = format_layer_split(v) if k == "layer_split" else v
    return ",".join(f"{k}={v}" for k, v in d.items()), d


def _pid_alive(pid: int | None) -> bool:
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, another user's
        return True
    except OSError:
        return False
    return True


def _is_busy(e: sqlite3.OperationalError) -> bool:
    msg = str(e).lower()
    return "locked" in msg or "busy" in msg


# --- the store ----------------------------------------------------------------------------------------------

class Memory:
    """The Sharding Memory over one SQLite file. ``Memory.open(path)`` (or ``Memory(path)``); a context manager
    that closes the connection on exit. ``recovered`` lists the trials ``open`` marked killed."""

    def __init__(self, path: str | Path | None = None, busy_timeout_s: float = BUSY_TIMEOUT_S):
        self.path = Path(path) if path is not None else default_memory_path()
        self.busy_timeout_s = float(busy_timeout_s)
        self.host = socket.gethostname()
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self.recovered: list[int] = []
        in_memory = str(path) == ":memory:"
        if not in_memory:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise AsapError("memory", f"cannot create the folder of {self.path} ({e.strerror or e})") from None
            if self.path.is_dir():
                raise AsapError("memory", f"{self.path} is a folder, not a memory file")
        try:
            self._conn = sqlite3.connect(":memory:" if in_memory else str(self.path), timeout=self.busy_timeout_s,
                                         isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise AsapError("memory", f"cannot open {self.path} ({e})") from None
        try:
            self._setup()
            self.recovered = self.recover()
        except BaseException:
            self.close()
            raise

    @classmethod
    def open(cls, path: str | Path | None = None, busy_timeout_s: float = BUSY_TIMEOUT_S) -> "Memory":
        """Open (creating it and its folder if needed) and upgrade the memory at ``path`` (default
        ``default_memory_path()``), then mark the trials whose process died ``killed``."""
        return cls(path, busy_timeout_s)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Memory({str(self.path)!r})"

    # --- connection plumbing ---

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise AsapError("memory", f"{self.path} is closed")
        return self._conn

    def _not_a_memory(self, e: Exception) -> AsapError:
        return AsapError("memory", f"{self.path} is not an asap memory file (not a SQLite database: {e})")

    def _retrying(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` again while another connection holds the write lock, up to the busy timeout."""
        deadline = time.monotonic() + self.busy_timeout_s
        delay = 0.005
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if not _is_busy(e):
                    raise
                if time.monotonic() >= deadline:
                    raise AsapError("memory", f"{self.path} stayed locked by another writer for more than "
                                              f"{self.busy_timeout_s:g} s") from None
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.2)

    def _write(self, fn: Callable[[sqlite3.Cursor], Any]) -> Any:
        """``fn(cursor)`` in one ``BEGIN IMMEDIATE`` transaction, committed before returning."""

        def attempt():
            with self._lock:
                cur = self.conn.cursor()
                cur.execute("BEGIN IMMEDIATE")
                try:
                    out = fn(cur)
                    cur.execute("COMMIT")
                    return out
                except BaseException:
                    if self.conn.in_transaction:
                        self.conn.execute("ROLLBACK")
                    raise

        try:
            return self._retrying(attempt)
        except sqlite3.IntegrityError as e:
            raise AsapError("memory", f"refused by {self.path}: {e}") from None
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError) and not _is_busy(e):
                raise AsapError("memory", f"write to {self.path} failed ({e})") from None
            raise self._not_a_memory(e) from None

    def _read(self, sql: str, args: Iterable[Any] = ()) -> list[sqlite3.Row]:
        def attempt():
            with self._lock:
                cur = self.conn.cursor()
                cur.row_factory = sqlite3.Row
                return cur.execute(sql, tuple(args)).fetchall()

        try:
            return self._retrying(attempt)
        except sqlite3.DatabaseError as e:
            raise AsapError("memory", f"read from {self.path} failed ({e})") from None

    def _setup(self) -> None:
        conn = self.conn
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            version = conn.execute("PRAGMA user_version").fetchone()[0]  # reads the header: not SQLite fails here
        except sqlite3.DatabaseError as e:
            raise self._not_a_memory(e) from None
        if version > SCHEMA_VERSION:
            raise AsapError("memory", f"{self.path} has schema version {version}, newer than this asap knows "
                                      f"({SCHEMA_VERSION}); upgrade asap to read it")
        try:
            self._retrying(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.DatabaseError as e:
            raise self._not_a_memory(e) from None
        if version < SCHEMA_VERSION:
            self._migrate()

    def _migrate(self) -> None:
        def run(cur: sqlite3.Cursor) -> None:
            version = cur.execute("PRAGMA user_version").fetchone()[0]  # again, under the write lock
            if version == 0:
                foreign = [r[0] for r in cur.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
                if foreign:
                    raise AsapError("memory", f"{self.path} is a SQLite database of something else (tables: "
                                              f"{', '.join(sorted(foreign)[:5])}), not an asap memory")
            if version > SCHEMA_VERSION:
                raise AsapError("memory", f"{self.path} has schema version {version}, newer than this asap "
                                          f"knows ({SCHEMA_VERSION}); upgrade asap to read it")
            for v in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[v].split(";"):
                    if statement.strip():
                        cur.execute(statement)
                cur.execute(f"PRAGMA user_version = {v + 1}")

        self._write(run)

    @property
    def schema_version(self) -> int:
        """The file's ``PRAGMA user_version``."""
        return self._read("PRAGMA user_version")[0][0]

    # --- experiments ---

    def experiment(self, workload: dict) -> int:
        """The id of the experiment of this workload (by ``workload_key``), created if it is new."""
        w = normalize_workload(workload)
        key = workload_key(w)
        body = _dumps(w, "workload")

        def run(cur):
            row = cur.execute("SELECT id, workload FROM experiments WHERE workload_key = ?", (key,)).fetchone()
            if row is None:
                cur.execute("INSERT INTO experiments (workload_key, workload, created_at) VALUES (?, ?, ?)",
                            (key, body, _now()))
                return cur.lastrowid
            old = json.loads(row[1])
            merged = {**old, **{k: v for k, v in w.items() if v is not None and old.get(k) is None}}
            if merged != old:  # a later description that knows more (the family, the parameter count)
                cur.execute("UPDATE experiments SET workload = ? WHERE id = ?", (_dumps(merged, "workload"), row[0]))
            return row[0]

        return self._write(run)

    def experiments(self) -> list[dict]:
        """Every experiment, oldest first: ``{id, workload_key, workload, created_at}``."""
        return [self._experiment_row(r) for r in self._read("SELECT * FROM experiments ORDER BY id")]

    def get_experiment(self, experiment_id: int) -> dict:
        rows = self._read("SELECT * FROM experiments WHERE id = ?", (int(experiment_id),))
        if not rows:
            raise AsapError("experiment", f"no experiment {experiment_id} in {self.path}")
        return self._experiment_row(rows[0])

    @staticmethod
    def _experiment_row(r: sqlite3.Row) -> dict:
        return {"id": r["id"], "workload_key": r["workload_key"], "workload": json.loads(r["workload"]),
                "created_at": r["created_at"]}

    def similar_experiments(self, workload: dict, k: int = 5) -> list[tuple[dict, float]]:
        """Other experiments (not this workload's own), most similar first, with a score in [0, 1]: a weighted
        sum of the same model family (0.3; the same model name when a family is missing), a parameter count
        close on a log scale (0.3; 0 at 100x apart), the same accelerator family (0.2; the same accelerator
        name when a family is missing) and a device count close on a log scale (0.2; 0 at 64x apart). A figure
        one side lacks adds nothing. Experiments scoring 0 are left out."""
        w = normalize_workload(workload)
        own = workload_key(w)
        scored = []
        for e in self.experiments():
            if e["workload_key"] == own:
                continue
            s = workload_similarity(w, e["workload"])
            if s > 0:
                scored.append((e, s))
        scored.sort(key=lambda es: (-es[1], -es[0]["id"]))
        return scored[:max(0, int(k))]

    # --- trials ---

    def begin_trial(self, experiment_id: int, strategy: str | dict, predicted_step_time_s: float | None = None,
                    executor: str = "", diagnosis: dict | None = None) -> int:
        """Record a trial as ``running`` by this process (pid, host), committed at once; its id."""
        text, parsed = canonical_strategy(strategy)
        predicted = _float_or_none(predicted_step_time_s, "predicted_step_time_s")
        args = (int(experiment_id), text, _dumps(parsed, "strategy"), predicted, _dumps(diagnosis, "diagnosis"),
                str(executor or ""), os.getpid(), self.host, _now())

        def run(cur):
            if cur.execute("SELECT 1 FROM experiments WHERE id = ?", (args[0],)).fetchone() is None:
                raise AsapError("experiment", f"no experiment {experiment_id} in {self.path}")
            cur.execute("INSERT INTO trials (experiment_id, strategy_string, strategy, status, "
                        "predicted_step_time_s, diagnosis, executor, pid, host, started_at) "
                        "VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?, ?)", args)
            return cur.lastrowid

        return self._write(run)

    def finish_trial(self, trial_id: int, status: str, measured_step_time_s: float | None = None, reason: str = "",
                     diagnosis: dict | None = None, traces: list | None = None) -> None:
        """Close a trial: ``status`` ok | failed | skipped | killed, what it measured, why it ended so. A
        ``diagnosis`` or ``traces`` left ``None`` keeps what the trial had."""
        if status not in FINISHED:
            raise AsapError("status", f"must be one of {', '.join(FINISHED)}, got {status!r}")
        measured = _float_or_none(measured_step_time_s, "measured_step_time_s")
        diag, tr = _dumps(diagnosis, "diagnosis"), _dumps(traces, "traces")

        def run(cur):
            cur.execute("UPDATE trials SET status = ?, measured_step_time_s = ?, reason = ?, "
                        "diagnosis = COALESCE(?, diagnosis), traces = COALESCE(?, traces), ended_at = ? "
                        "WHERE id = ?", (status, measured, str(reason or ""), diag, tr, _now(), int(trial_id)))
            if cur.rowcount == 0:
                raise AsapError("trial", f"no trial {trial_id} in {self.path}")

        self._write(run)

    def has_strategy(self, experiment_id: int, strategy: str | dict) -> bool:
        """Whether this experiment already ran this strategy to an end (a trial ``ok`` or ``failed``; the
        loop never re-runs those). Keys in any order."""
        text, _ = canonical_strategy(strategy)
        rows = self._read("SELECT 1 FROM trials WHERE experiment_id = ? AND strategy_string = ? "
                          "AND status IN ('ok', 'failed') LIMIT 1", (int(experiment_id), text))
        return bool(rows)

    def trials(self, experiment_id: int | None = None) -> list[dict]:
        """The trials (of one experiment, or all), in the order they began."""
        if experiment_id is None:
            rows = self._read("SELECT * FROM trials ORDER BY id")
        else:
            rows = self._read("SELECT * FROM trials WHERE experiment_id = ? ORDER BY id", (int(experiment_id),))
        return [self._trial_row(r) for r in rows]

    def trial(self, trial_id: int) -> dict:
        rows = self._read("SELECT * FROM trials WHERE id = ?", (int(trial_id),))
        if not rows:
            raise AsapError("trial", f"no trial {trial_id} in {self.path}")
        return self._trial_row(rows[0])

    @staticmethod
    def _trial_row(r: sqlite3.Row) -> dict:
        d = {k: r[k] for k in r.keys()}
        for k in _JSON_TRIAL:
            d[k] = _loads(d.get(k))
        return d

    def recover(self) -> list[int]:
        """Mark ``killed`` every trial still ``running`` whose process is gone: on this host, a pid that is not
        alive; on another host, one that began more than a day ago. The ids marked, in order."""
        running = self._read("SELECT id, pid, host, started_at FROM trials WHERE status = 'running' ORDER BY id")
        now = datetime.now(timezone.utc)
        dead = []
        for r in running:
            if r["host"] == self.host:
                if not _pid_alive(r["pid"]):
                    dead.append(r["id"])
            else:
                started = _parse_time(r["started_at"])
                if started is None or now - started > FOREIGN_HOST_STALE:
                    dead.append(r["id"])
        if not dead:
            return []
        ended = _now()

        def run(cur):
            marked = []
            for tid in dead:  # only those still running (another process may have recovered them meanwhile)
                cur.execute("UPDATE trials SET status = 'killed', reason = ?, ended_at = ? "
                            "WHERE id = ? AND status = 'running'", (KILLED_REASON, ended, tid))
                if cur.rowcount:
                    marked.append(tid)
            return marked

        return self._write(run)

    # --- audit ---

    def log(self, experiment_id: int, agent: str, step: str, inputs: Any = None, retrieved: list | None = None,
            candidates: list | None = None, outputs: Any = None, trial_id: int | None = None) -> int:
        """One audit row: what ``agent`` saw (``inputs``, the ids it ``retrieved``), weighed (``candidates``:
        ``[{strategy, kept, why}]``) and produced (``outputs``) at ``step``. Its id."""
        if candidates is not None:
            if not isinstance(candidates, (list, tuple)):
                raise AsapError("candidates", f"must be a list of {{strategy, kept, why}}, got "
                                              f"{type(candidates).__name__}")
            for c in candidates:
                if not isinstance(c, dict) or "strategy" not in c:
                    raise AsapError("candidates", f"each must be a mapping with strategy, kept and why, got {c!r}")
        args = (int(experiment_id), None if trial_id is None else int(trial_id), str(agent), str(step),
                _dumps(inputs, "inputs"), _dumps(None if retrieved is None else list(retrieved), "retrieved"),
                _dumps(None if candidates is None else list(candidates), "candidates"), _dumps(outputs, "outputs"),
                _now())

        def run(cur):
            if cur.execute("SELECT 1 FROM experiments WHERE id = ?", (args[0],)).fetchone() is None:
                raise AsapError("experiment", f"no experiment {experiment_id} in {self.path}")
            if args[1] is not None and cur.execute("SELECT 1 FROM trials WHERE id = ?",
                                                   (args[1],)).fetchone() is None:
                raise AsapError("trial", f"no trial {trial_id} in {self.path}")
            cur.execute("INSERT INTO audit (experiment_id, trial_id, agent, step, inputs, retrieved, candidates, "
                        "outputs, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", args)
            return cur.lastrowid

        return self._write(run)

    def audit(self, experiment_id: int | None = None) -> list[dict]:
        """The audit rows (of one experiment, or all), in the order they were written."""
        if experiment_id is None:
            rows = self._read("SELECT * FROM audit ORDER BY id")
        else:
            rows = self._read("SELECT * FROM audit WHERE experiment_id = ? ORDER BY id", (int(experiment_id),))
        out = []
        for r in rows:
            d = {k: r[k] for k in r.keys()}
            for k in _JSON_AUDIT:
                d[k] = _loads(d.get(k))
            out.append(d)
        return out

    # --- export ---

    def export(self, experiment_id: int | None = None) -> dict:
        """``{experiments, trials, audit}``: everything (or one experiment's), JSON-serialisable."""
        if experiment_id is None:
            experiments = self.experiments()
        else:
            experiments = [self.get_experiment(experiment_id)]
        return {"experiments": experiments,
                "trials": self.trials(experiment_id), "audit": self.audit(experiment_id)}


def workload_similarity(a: dict, b: dict) -> float:
    """How alike two workloads are, in [0, 1] (see ``Memory.similar_experiments``)."""
    a, b = normalize_workload(a), normalize_workload(b)
    score = 0.0
    fam_a, fam_b = a.get("model_family"), b.get("model_family")
    if fam_a and fam_b:
        score += 0.3 * (fam_a.lower() == fam_b.lower())
    elif a.get("model") and b.get("model"):
        score += 0.3 * (a["model"].lower() == b["model"].lower())
    score += 0.3 * _log_closeness(a.get("params"), b.get("params"), 10.0, 2.0)
    acc_a, acc_b = a.get("accelerator_family"), b.get("accelerator_family")
    if acc_a and acc_b:
        score += 0.2 * (acc_a.lower() == acc_b.lower())
    elif a.get("accelerator") and b.get("accelerator"):
        score += 0.2 * (a["accelerator"].lower() == b["accelerator"].lower())
    score += 0.2 * _log_closeness(a.get("devices"), b.get("devices"), 2.0, 6.0)
    return round(min(1.0, max(0.0, score)), 6)


def _log_closeness(x: Any, y: Any, base: float, span: float) -> float:
    """1 when equal, falling linearly in log_base(x / y) to 0 at ``span``; 0 when either is missing."""
    try:
        x, y = float(x), float(y)
    except (TypeError, ValueError):
        return 0.0
    if not (x > 0 and y > 0 and math.isfinite(x) and math.isfinite(y)):
        return 0.0
    return max(0.0, 1.0 - abs(math.log(x / y, base)) / span)

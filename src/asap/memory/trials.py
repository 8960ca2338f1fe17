"""The Sharding Memory's trials: one row per strategy tried on an experiment, begun ``running`` and committed
before it starts, finished ``ok | failed | skipped | killed``, and the recovery of trials whose process died."""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime, timezone

from pydantic import RootModel, field_validator

from asap.memory.connection import Store
from asap.memory.records import _dumps, _float_or_none, _loads, _now, _parse_time, canonical_strategy
from asap.memory.rows import Trial
from asap.memory.schema import FINISHED, FOREIGN_HOST_STALE, KILLED_REASON
from asap.errors import AsapError, validated
from asap.spec.words import ENDED_STATUSES, TrialStatus


class FinishedStatus(RootModel[TrialStatus]):
    """How a trial ended: a ``TrialStatus`` other than running."""

    @field_validator("root", mode="before")
    @classmethod
    def _finished(cls, v: object) -> object:
        if v not in FINISHED:
            raise ValueError(f"must be one of {', '.join(FINISHED)}, got {getattr(v, 'value', v)!r}")
        return v


# a trial's row with its experiment's workload (what its strategy completes on)
_WITH_WORKLOAD = "SELECT t.*, e.workload AS workload FROM trials t JOIN experiments e ON e.id = t.experiment_id"


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


class Trials(Store):
    """The ``trials`` table's methods of ``Memory`` (``Memory`` sets ``host``)."""

    host: str

    def begin_trial(self, experiment_id: int, strategy: str | dict, predicted_step_time_s: float | None = None,
                    executor: str = "", diagnosis: dict | None = None) -> int:
        """Record a trial as ``running`` by this process (pid, host), committed at once; its id."""
        text, parsed = canonical_strategy(strategy)
        predicted = _float_or_none(predicted_step_time_s, "predicted_step_time_s")
        args = (int(experiment_id), text, _dumps(parsed, "strategy"), TrialStatus.RUNNING.value, predicted,
                _dumps(diagnosis, "diagnosis"), str(executor or ""), os.getpid(), self.host, _now())

        def run(cur):
            if cur.execute("SELECT 1 FROM experiments WHERE id = ?", (args[0],)).fetchone() is None:
                raise AsapError("experiment", f"no experiment {experiment_id} in {self.path}")
            cur.execute("INSERT INTO trials (experiment_id, strategy_string, strategy, status, "
                        "predicted_step_time_s, diagnosis, executor, pid, host, started_at) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", args)
            return cur.lastrowid

        return self._write(run)

    def finish_trial(self, trial_id: int, status: TrialStatus | str, measured_step_time_s: float | None = None,
                     reason: str = "", diagnosis: dict | None = None, traces: list | None = None) -> None:
        """Close a trial: ``status`` ok | failed | skipped | killed, what it measured, why it ended so. A
        ``diagnosis`` or ``traces`` left ``None`` keeps what the trial had."""
        status = validated(FinishedStatus, status, whole="status").root.value
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
                          "AND status IN (?, ?) LIMIT 1",
                          (int(experiment_id), text, *(s.value for s in ENDED_STATUSES)))
        return bool(rows)

    def trials(self, experiment_id: int | None = None) -> list[Trial]:
        """The trials (of one experiment, or all), in the order they began, each strategy completed on its
        experiment's devices and framework (``Trial``)."""
        if experiment_id is None:
            rows = self._read(f"{_WITH_WORKLOAD} ORDER BY t.id")
        else:
            rows = self._read(f"{_WITH_WORKLOAD} WHERE t.experiment_id = ? ORDER BY t.id", (int(experiment_id),))
        return [self._trial_row(r) for r in rows]

    def trial(self, trial_id: int) -> Trial:
        rows = self._read(f"{_WITH_WORKLOAD} WHERE t.id = ?", (int(trial_id),))
        if not rows:
            raise AsapError("trial", f"no trial {trial_id} in {self.path}")
        return self._trial_row(rows[0])

    @staticmethod
    def _trial_row(r: sqlite3.Row) -> Trial:
        return Trial.from_row(r, _loads(r["workload"]))

    def recover(self) -> list[int]:
        """Mark ``killed`` every trial still ``running`` whose process is gone: on this host, a pid that is not
        alive; on another host, one that began more than a day ago. The ids marked, in order."""
        running = self._read("SELECT id, pid, host, started_at FROM trials WHERE status = ? ORDER BY id",
                             (TrialStatus.RUNNING.value,))
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
                cur.execute("UPDATE trials SET status = ?, reason = ?, ended_at = ? WHERE id = ? AND status = ?",
                            (TrialStatus.KILLED.value, KILLED_REASON, ended, tid, TrialStatus.RUNNING.value))
                if cur.rowcount:
                    marked.append(tid)
            return marked

        return self._write(run)

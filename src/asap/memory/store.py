"""``Memory``: the Sharding Memory over one SQLite file, its experiments, trials and audit trail together."""

from __future__ import annotations

import socket
import sqlite3
import threading
from pathlib import Path

from asap.memory.audit import Audit
from asap.memory.experiments import Experiments
from asap.memory.runs import MeasuredRuns
from asap.memory.schema import BUSY_TIMEOUT_S, default_memory_path
from asap.memory.trials import Trials
from asap.errors import AsapError


class Memory(Experiments, Trials, Audit, MeasuredRuns):
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

    # --- export ---

    def export(self, experiment_id: int | None = None) -> dict:
        """``{experiments, trials, audit, measured_runs}``: everything (or one experiment's, without the measured
        runs), JSON-serialisable (the JSON edge: the rows' ``to_dict``)."""
        if experiment_id is None:
            experiments = self.experiments()
        else:
            experiments = [self.get_experiment(experiment_id)]
        return {"experiments": [e.to_dict() for e in experiments],
                "trials": [t.to_dict() for t in self.trials(experiment_id)], "audit": self.audit(experiment_id),
                **({"measured_runs": [r.to_dict() for r in self.measured_runs()]} if experiment_id is None else {})}

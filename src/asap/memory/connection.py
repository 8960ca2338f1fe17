"""The Sharding Memory's connection plumbing: reads, writes in one ``BEGIN IMMEDIATE`` transaction retried while
another writer holds the lock, and opening a file (its pragmas, the schema check and the migrations)."""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from asap.memory.schema import MIGRATIONS, SCHEMA_VERSION
from asap.errors import AsapError


def _is_busy(e: sqlite3.OperationalError) -> bool:
    msg = str(e).lower()
    return "locked" in msg or "busy" in msg


class Store:
    """One SQLite connection to a memory file and the plumbing every table's methods share (``Memory`` sets
    ``path``, ``busy_timeout_s``, ``_lock`` and ``_conn``)."""

    path: Path
    busy_timeout_s: float
    _lock: threading.RLock
    _conn: sqlite3.Connection | None

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

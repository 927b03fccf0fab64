"""The metadata store for one node: a SQLite file with versioned nodes.

Layout (SQLite, WAL journal, synchronous=FULL so a returned write survives power loss):

    nodes(path TEXT PRIMARY KEY, parent TEXT, value BLOB, version INTEGER)   -- parent indexed
    counters(name TEXT PRIMARY KEY, value INTEGER)
    ephemerals(path TEXT PRIMARY KEY)       -- nodes deleted when the session ends

The store's session is the time between open and close, so ephemeral nodes are deleted at close and,
since a process that died never closed, again at open. There is no connection to lose: the session
state never changes and no session event is ever reported.

One thread owns the connection. Operations queue up while it works and are executed together in one
transaction, each inside its own savepoint so a lost compare-and-set does not undo its neighbours:
group commit, so a burst of topic creations costs one fsync, not one each. Callers await futures
resolved on their event loop after the commit. Watches fire on the loop after the commit too.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sqlite3
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from storage.api import (BadVersion, Fenced, Guard, NodeExists, NoNode, SessionCallback, StorageError, Versioned,
                         WatchCallback)

log = logging.getLogger("gateway.storage.metadata")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (path TEXT PRIMARY KEY, parent TEXT NOT NULL, value BLOB NOT NULL,
                                  version INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS nodes_parent ON nodes(parent);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS ephemerals (path TEXT PRIMARY KEY);
"""

_Op = Callable[[sqlite3.Connection], Any]


def _end_session(conn: sqlite3.Connection) -> None:
    """Delete the ephemeral nodes of the session that ends (or of one that ended with its process)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("DELETE FROM nodes WHERE path IN (SELECT path FROM ephemerals)")
        conn.execute("DELETE FROM ephemerals")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _check_guard(conn: sqlite3.Connection, guard: Guard | None) -> None:
    if guard is None:
        return
    row = conn.execute("SELECT version FROM nodes WHERE path=?", (guard.path,)).fetchone()
    if row is None or row[0] != guard.version:
        found = "absent" if row is None else f"at version {row[0]}"
        raise Fenced(f"guard {guard.path} is {found}, expected version {guard.version}")


def _parent(path: str) -> str:
    if not path.startswith("/") or path.endswith("/") or "//" in path:
        raise ValueError(f"bad metadata path {path!r}")
    return path.rsplit("/", 1)[0] or "/"


class SqliteMetadataStore:
    """MetadataStore on SQLite. Thread-safety: the public methods are called from one event loop;
    the connection is touched only by the store's own thread."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._loop = asyncio.get_running_loop()
        self._queue: list[tuple[_Op, asyncio.Future, str | None]] = []
        self._cond = threading.Condition()
        self._closed = False
        self._watches: dict[str, list[WatchCallback]] = defaultdict(list)
        self._ready = threading.Event()
        self._open_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="metadata-sqlite", daemon=True)
        self._thread.start()

    @classmethod
    async def open(cls, path: Path) -> "SqliteMetadataStore":
        store = cls(path)
        await asyncio.to_thread(store._ready.wait)
        if store._open_error is not None:
            raise StorageError(f"cannot open metadata store {path}: {store._open_error}")
        return store

    # --- the store's thread -----------------------------------------------------------------

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(_SCHEMA)
            _end_session(conn)
        except BaseException as exc:  # reported to open()
            self._open_error = exc
            self._ready.set()
            return
        self._ready.set()
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                batch, self._queue = self._queue, []
                if not batch and self._closed:
                    break
            self._execute(conn, batch)
        try:
            _end_session(conn)
        except sqlite3.Error as exc:  # they go at the next open instead
            log.error("metadata store could not delete its ephemeral nodes at close: %s", exc)
        conn.close()

    def _execute(self, conn: sqlite3.Connection, batch: list[tuple[_Op, asyncio.Future, str | None]]) -> None:
        results: list[tuple[asyncio.Future, bool, Any, str | None]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for op, fut, changed in batch:
                conn.execute("SAVEPOINT op")
                try:
                    value = op(conn)
                except Exception as exc:
                    conn.execute("ROLLBACK TO op")
                    results.append((fut, False, exc, None))
                else:
                    results.append((fut, True, value, changed))
                conn.execute("RELEASE op")
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            # The commit itself failed: nothing in this batch is durable, so every op fails.
            log.error("metadata commit failed: %s", exc)
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            error = StorageError(f"metadata store write failed: {exc}")
            results = [(fut, False, error, None) for _, fut, _ in batch]
        self._loop.call_soon_threadsafe(self._complete, results)

    def _complete(self, results: list[tuple[asyncio.Future, bool, Any, str | None]]) -> None:
        for fut, ok, value, changed in results:
            if not fut.done():
                fut.set_result(value) if ok else fut.set_exception(value)
            if ok and changed is not None:
                for callback in list(self._watches.get(changed, ())):
                    try:
                        callback(changed)
                    except Exception:
                        log.exception("metadata watch on %s failed", changed)

    def _submit(self, op: _Op, changed: str | None = None) -> asyncio.Future:
        fut = self._loop.create_future()
        with self._cond:
            if self._closed:
                raise StorageError("metadata store is closed")
            self._queue.append((op, fut, changed))
            self._cond.notify()
        return fut

    # --- MetadataStore ----------------------------------------------------------------------

    async def get(self, path: str, *, latest: bool = False) -> Versioned | None:   # one file: always latest
        def op(conn: sqlite3.Connection) -> Versioned | None:
            row = conn.execute("SELECT value, version FROM nodes WHERE path=?", (path,)).fetchone()
            return None if row is None else Versioned(bytes(row[0]), row[1])
        return await self._submit(op)

    async def create(self, path: str, value: bytes, *, ephemeral: bool = False, guard: Guard | None = None) -> int:
        parent = _parent(path)

        def op(conn: sqlite3.Connection) -> int:
            _check_guard(conn, guard)
            try:
                conn.execute("INSERT INTO nodes VALUES (?, ?, ?, 0)", (path, parent, value))
            except sqlite3.IntegrityError:
                raise NodeExists(path) from None
            if ephemeral:
                conn.execute("INSERT INTO ephemerals VALUES (?)", (path,))
            return 0
        return await self._submit(op, path)

    async def put(self, path: str, value: bytes, expected_version: int | None = None, *,
                  guard: Guard | None = None) -> int:
        parent = _parent(path)

        def op(conn: sqlite3.Connection) -> int:
            _check_guard(conn, guard)
            row = conn.execute("SELECT version FROM nodes WHERE path=?", (path,)).fetchone()
            if expected_version is not None:
                if row is None:
                    raise NoNode(path)
                if row[0] != expected_version:
                    raise BadVersion(f"{path}: version {row[0]}, expected {expected_version}")
            if row is None:
                conn.execute("INSERT INTO nodes VALUES (?, ?, ?, 0)", (path, parent, value))
                return 0
            conn.execute("UPDATE nodes SET value=?, version=? WHERE path=?", (value, row[0] + 1, path))
            return row[0] + 1
        return await self._submit(op, path)

    async def delete(self, path: str, expected_version: int | None = None, *, guard: Guard | None = None) -> None:
        def op(conn: sqlite3.Connection) -> None:
            _check_guard(conn, guard)
            row = conn.execute("SELECT version FROM nodes WHERE path=?", (path,)).fetchone()
            if row is None:
                raise NoNode(path)
            if expected_version is not None and row[0] != expected_version:
                raise BadVersion(f"{path}: version {row[0]}, expected {expected_version}")
            conn.execute("DELETE FROM nodes WHERE path=?", (path,))
            conn.execute("DELETE FROM ephemerals WHERE path=?", (path,))
        return await self._submit(op, path)

    async def children(self, path: str) -> list[str]:
        prefix_len = len(path.rstrip("/")) + 1

        def op(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute("SELECT path FROM nodes WHERE parent=? ORDER BY path", (path.rstrip("/") or "/",))
            return [row[0][prefix_len:] for row in rows]
        return await self._submit(op)

    async def next_id(self, counter: str) -> int:
        def op(conn: sqlite3.Connection) -> int:
            conn.execute("INSERT INTO counters VALUES (?, 0) ON CONFLICT(name) DO UPDATE SET value = value + 1",
                         (counter,))
            return conn.execute("SELECT value FROM counters WHERE name=?", (counter,)).fetchone()[0]
        return await self._submit(op)

    def watch(self, path: str, callback: WatchCallback) -> Callable[[], None]:
        self._watches[path].append(callback)

        def cancel() -> None:
            callbacks = self._watches.get(path)
            if callbacks and callback in callbacks:
                callbacks.remove(callback)
                if not callbacks:
                    del self._watches[path]
        return cancel

    def on_session_event(self, callback: SessionCallback) -> Callable[[], None]:
        return lambda: None  # the session neither drops nor expires while the store is open

    @property
    def session_id(self) -> int | None:
        return None

    def session_alive_until(self) -> float:
        return math.inf

    async def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        await asyncio.to_thread(self._thread.join)

"""The audit log: every administrative change and every refusal, as JSON lines a SIEM can ingest.

One object per line, always with "time" (UTC, ISO 8601, milliseconds) and "event":

    {"time": ..., "event": "change", "who": "root", "from": "127.0.0.1:50312",
     "action": "PUT /api/v1/permissions/acme/shop/alice", "target": "permission acme/shop/alice",
     "before": {...} | null, "after": {...} | null, "status": 200}
    ("event": "failed" for an attempt answered 400 or above, which changed nothing)
    {"time": ..., "event": "refused", "kind": "login" | "authorization", "protocol": "kafka",
     "user": "bob", "resource": "topic acme/shop/orders", "reason": "WRITE", "from": "10.0.0.7:41000",
     "count": 1}

Refusals repeat (a client retrying a login, a producer refused per request), so their volume is
bounded: per (kind, protocol, user, resource, reason) the first refusal of an interval is written at
once and the others of that interval are counted, then written as one line with "count": n and
"first": the time of the first one counted. So a refusal storm costs one line per key per interval;
the keys kept in memory are bounded too (past MAX_KEYS every pending count is written out at once),
and so are the lines themselves: past MAX_LINES refusal lines in an interval (names that change
every time: a scan of user names), the rest are only counted and written as one line with
"kind": "overflow". Names from clients are cut to MAX_NAME characters.

Writes are appends of a few hundred bytes to a file opened once, without fsync: an audit line is
as durable as the page cache, like the process's own log. A file that cannot be written is reported
once in the process log and the gateway goes on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

log = logging.getLogger("gateway.core.audit")

DEFAULT_REFUSAL_INTERVAL_S = 60.0
MAX_KEYS = 10_000
MAX_LINES = 1_000
MAX_NAME = 256

_RefusalKey = tuple[str, str, str, str, str]


@dataclass(slots=True)
class _Window:
    started: float            # monotonic
    counted: int = 0          # refusals after the first, not written yet
    first_counted: str = ""   # the time of the first of them
    source: str | None = None  # where the latest came from


def _timestamp(wall: float) -> str:
    return datetime.fromtimestamp(wall, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AuditLog:
    """Disabled (writes nothing) until `open`."""

    def __init__(self, *, wall: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 max_keys: int = MAX_KEYS, max_lines: int = MAX_LINES) -> None:
        self._wall = wall
        self._monotonic = monotonic
        self._max_keys = max_keys
        self._max_lines = max_lines
        self._lines = 0                # refusal lines written in the current interval
        self._lines_since = monotonic()
        self._overflow = 0             # refusals past max_lines, not written yet
        self._file: IO[str] | None = None
        self.path: Path | None = None
        self.refusal_interval_s = DEFAULT_REFUSAL_INTERVAL_S
        self._windows: dict[_RefusalKey, _Window] = {}
        self._flusher: asyncio.Task | None = None
        self._failed = False

    @property
    def enabled(self) -> bool:
        return self._file is not None

    def open(self, path: Path, *, refusal_interval_s: float = DEFAULT_REFUSAL_INTERVAL_S) -> None:
        """Append to `path` from now on; pending counts are written every interval (a task, when
        an event loop runs)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8", buffering=1)
        self.path = path
        self.refusal_interval_s = refusal_interval_s
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._flusher = loop.create_task(self._flush_every_interval(), name="audit-flush")

    def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None
        if self._file is not None:
            self.flush(everything=True)
            self._file.close()
            self._file = None

    # --- events -------------------------------------------------------------------------------

    def change(self, *, who: str, source: str | None, action: str, target: str, before: Any = None,
               after: Any = None, status: int | None = None) -> None:
        """An administrative change: who did what to which target, from where, and its state before and
        after. A `status` of 400 or more is an attempt that changed nothing: event "failed"."""
        if self._file is not None:
            event = "failed" if status is not None and status >= 400 else "change"
            self._write({"event": event, "who": who, "from": source, "action": action, "target": target,
                         "before": before, "after": after, "status": status})

    def refused(self, kind: str, protocol: str, user: str | None, resource: str, reason: str,
                source: str | None) -> None:
        """A refused login (`kind` "login") or operation ("authorization")."""
        if self._file is None:
            return
        user, resource = (user or "")[:MAX_NAME], resource[:MAX_NAME]
        key = (kind, protocol, user, resource, reason)
        now = self._monotonic()
        window = self._windows.get(key)
        if window is not None and now - window.started < self.refusal_interval_s:
            if not window.counted:
                window.first_counted = _timestamp(self._wall())
            window.counted += 1
            window.source = source
            return
        if window is not None:
            self._write_counted(key, window)
        elif len(self._windows) >= self._max_keys:
            self.flush(everything=True)
        if not self._line_allowed(now):
            self._overflow += 1
            return
        self._windows[key] = _Window(now)
        self._write({"event": "refused", "kind": kind, "protocol": protocol, "user": user or None,
                     "resource": resource, "reason": reason, "from": source, "count": 1})

    def _line_allowed(self, now: float) -> bool:
        if now - self._lines_since >= self.refusal_interval_s:
            self._write_overflow()
            self._lines, self._lines_since = 0, now
        self._lines += 1
        return self._lines <= self._max_lines

    def _write_overflow(self) -> None:
        if self._overflow:
            self._write({"event": "refused", "kind": "overflow", "count": self._overflow})
            self._overflow = 0

    def flush(self, *, everything: bool = False) -> None:
        """Write the counts of the intervals that ended (`everything`: of all), and forget them."""
        now = self._monotonic()
        for key, window in list(self._windows.items()):
            if everything or now - window.started >= self.refusal_interval_s:
                del self._windows[key]
                self._write_counted(key, window)
        if everything or now - self._lines_since >= self.refusal_interval_s:
            self._write_overflow()

    # --- writing ------------------------------------------------------------------------------

    def _write_counted(self, key: _RefusalKey, window: _Window) -> None:
        if window.counted:
            kind, protocol, user, resource, reason = key
            self._write({"event": "refused", "kind": kind, "protocol": protocol, "user": user or None,
                         "resource": resource, "reason": reason, "from": window.source, "count": window.counted,
                         "first": window.first_counted})

    def _write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        line = json.dumps({"time": _timestamp(self._wall()), **record}, separators=(",", ":"), default=str)
        try:
            self._file.write(line + "\n")
        except (OSError, ValueError) as exc:
            if not self._failed:
                log.error("writing the audit log %s failed: %s", self.path, exc)
                self._failed = True

    async def _flush_every_interval(self) -> None:
        while True:
            await asyncio.sleep(min(self.refusal_interval_s, 60.0))
            self.flush()

"""The record of a fault run: every send and every read, in the order the test saw them.

A send is invoked, then completes once: `ok` (acknowledged; Kafka gives its offset), `fail` (definitely
not written) or `info` (unknown: a timeout, a lost connection; the value may or may not be stored).
A read is one value seen at one offset by one reader. Fault events are logged beside them, so a dump
shows what was done when. The checkers (checkers.py) work on the finished history, as Jepsen's do.

Thread-safe: producer threads, consumer threads and client callbacks all append to one history.
Dumped and loaded as JSON lines, one event per line, so a failing run can be checked again offline.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

INVOKE, OK, FAIL, INFO, READ, FAULT = "invoke", "ok", "fail", "info", "read", "fault"
COMPLETIONS = (OK, FAIL, INFO)


@dataclass(slots=True)
class Send:
    """One send as the checkers see it: its invoke merged with its completion (status INVOKE if none)."""

    op: int
    process: str
    key: str
    value: str
    status: str = INVOKE
    offset: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Read:
    reader: str
    key: str
    offset: int | None
    value: str
    redelivered: bool = False


class History:
    def __init__(self, events: Iterable[dict] = ()) -> None:
        self._lock = threading.Lock()
        self._events: list[dict] = list(events)
        self._counts = Counter(event["type"] for event in self._events)  # polled often: kept, not counted
        start = max((event["op"] for event in self._events if event["type"] == INVOKE), default=-1) + 1
        self._ops = itertools.count(start)

    # --- recording ------------------------------------------------------------------------------

    def invoke(self, process: str, key: str, value: str) -> int:
        """Log that `process` is about to send `value` to `key`; returns the op id to complete."""
        op = next(self._ops)  # itertools.count is atomic under the GIL
        self._append({"type": INVOKE, "op": op, "process": process, "key": key, "value": value})
        return op

    def ok(self, op: int, offset: int | None = None) -> None:
        self._append({"type": OK, "op": op, "offset": offset})

    def fail(self, op: int, error: str) -> None:
        self._append({"type": FAIL, "op": op, "error": error})

    def info(self, op: int, error: str) -> None:
        self._append({"type": INFO, "op": op, "error": error})

    def read(self, reader: str, key: str, offset: int | None, value: str, redelivered: bool = False) -> None:
        self._append({"type": READ, "reader": reader, "key": key, "offset": offset, "value": value,
                      "redelivered": redelivered})

    def fault(self, name: str, **details: object) -> None:
        self._append({"type": FAULT, "name": name, **details})

    def _append(self, event: dict) -> None:
        event["t"] = time.monotonic()
        with self._lock:
            self._events.append(event)
            self._counts[event["type"]] += 1

    # --- reading --------------------------------------------------------------------------------

    @property
    def events(self) -> list[dict]:
        with self._lock:
            return list(self._events)

    def sends(self) -> list[Send]:
        """Every send, in invoke order, with its completion. A second completion of one op (a client
        bug) keeps the first: what the test was told first is what it relied on."""
        by_op: dict[int, Send] = {}
        for event in self.events:
            kind = event["type"]
            if kind == INVOKE:
                by_op[event["op"]] = Send(event["op"], event["process"], event["key"], event["value"])
            elif kind in COMPLETIONS:
                send = by_op[event["op"]]
                if send.status == INVOKE:
                    send.status, send.offset, send.error = kind, event.get("offset"), event.get("error")
        return list(by_op.values())

    def reads(self) -> list[Read]:
        return [Read(e["reader"], e["key"], e["offset"], e["value"], e.get("redelivered", False))
                for e in self.events if e["type"] == READ]

    def faults(self) -> list[dict]:
        return [event for event in self.events if event["type"] == FAULT]

    def count(self, event_type: str) -> int:
        """How many events of one type (OK: acknowledgements so far)."""
        return self._counts[event_type]

    # --- JSON lines -----------------------------------------------------------------------------

    def dump(self, path: Path) -> Path:
        with path.open("w") as out:
            for event in self.events:
                out.write(json.dumps(event, separators=(",", ":")) + "\n")
        return path

    @classmethod
    def load(cls, path: Path) -> "History":
        return cls(_json_lines(path))


def _json_lines(path: Path) -> Iterator[dict]:
    with path.open() as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)

"""How a held message is stored in the system topic, and what it is handed back as when due.

A held message is one record of the namespace's system topic:

    timestamp        the wall-clock ms at which it is due (so a scan reads due times without
                     decoding keys, values or headers)
    key, value       the message's own
    headers          the message's own, followed by one header of the core:
      delayed.target   "<kind>:<name>" (UTF-8): which kind of target routes it and to what, e.g.
                       "exchange:orders" (a queue namespace's exchange)

When due it is stamped with the time it is released (it is appended to its target then).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.records.builder import Record
from core.records.decoder import DecodedRecord

TARGET = "delayed.target"


@dataclass(frozen=True, slots=True)
class Target:
    kind: str        # the deliverer registered for this kind routes it
    name: str

    def encode(self) -> bytes:
        return f"{self.kind}:{self.name}".encode("utf-8", "surrogateescape")

    @classmethod
    def decode(cls, raw: bytes) -> "Target":
        kind, _, name = raw.decode("utf-8", "surrogateescape").partition(":")
        return cls(kind, name)


def held_record(record: Record, due_ms: int, target: Target) -> Record:
    return Record(due_ms, record.key, record.value, (*record.headers, (TARGET, target.encode())))


def released(record: DecodedRecord, now_ms: int) -> tuple[Target, Record] | None:
    """The target and the message as it goes there: the core's header removed, stamped `now_ms`.
    None if the record is not a held message (none of the core's stores wrote it)."""
    target = None
    headers = []
    for name, value in record.headers:
        if name == TARGET:
            target = Target.decode(value or b"")
        else:
            headers.append((name, value))
    if target is None:
        return None
    return target, Record(now_ms, record.key, record.value, tuple(headers))

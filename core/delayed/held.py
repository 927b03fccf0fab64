"""How a held message is stored in the system topic, and what it is handed back as when due.

A held message is one record of the namespace's system topic:

    timestamp        the wall-clock ms at which it is due (so a scan reads due times without
                     decoding keys, values or headers)
    key, value       the message's own
    headers          the message's own, followed by one header of the core:
      delayed.target   "<kind>:<name>" (UTF-8): which kind of target routes it and to what, e.g.
                       "exchange:orders" (a queue namespace's exchange)

When due it is stamped with the time it is released and appended to its destinations with one
header added, so that a restart can tell whether it got there (store.py):
      delayed.id       the held message's offset in the system topic, ASCII decimal

The system topic also holds the store's own records, empty but for one header and their value:
      delayed.release  a release record (index_format.py)
      delayed.cancel   a cancelled message: its offset and due time (two big-endian i64), then
                       its target as delayed.target has it
      delayed.txn-end  the end of a producer's transaction: its id (big-endian i64), then 1 for a
                       commit or 0 for an abort; a commit's batch holds, before it, copies of the
                       transaction's held messages without their delayed.txn header

A held message of a transaction (Kafka) also carries
      delayed.txn      the producer id, ASCII decimal: it waits, unindexed, for its transaction's end
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from core.records.builder import Record
from core.records.decoder import DecodedRecord

TARGET = "delayed.target"
ID = "delayed.id"
RELEASE = "delayed.release"
CANCEL = "delayed.cancel"
TXN = "delayed.txn"
TXN_END = "delayed.txn-end"
_TXN_END = struct.Struct(">qB")
_CANCEL = struct.Struct(">qq")


@dataclass(frozen=True, slots=True)
class Target:
    kind: str        # the deliverer registered for this kind routes it
    name: str

    @property
    def text(self) -> str:
        """"<kind>:<name>": the pending counts' key (what encode() writes, as text)."""
        return f"{self.kind}:{self.name}"

    def encode(self) -> bytes:
        return self.text.encode("utf-8", "surrogateescape")

    @classmethod
    def decode(cls, raw: bytes) -> Target:
        kind, _, name = raw.decode("utf-8", "surrogateescape").partition(":")
        return cls(kind, name)


def held_record(record: Record, due_ms: int, target: Target, txn: int | None = None) -> Record:
    own = ((TARGET, target.encode()),) if txn is None else ((TARGET, target.encode()), (TXN, str(txn).encode()))
    return Record(due_ms, record.key, record.value, (*record.headers, *own))


def target_of(record: DecodedRecord) -> Target | None:
    """The target of a held message; None for the store's own records."""
    for name, value in record.headers:
        if name == TARGET:
            return Target.decode(value or b"")
    return None


def kind_of(record: DecodedRecord) -> str | None:
    """TARGET (a held message), RELEASE, CANCEL or None (nothing the store wrote)."""
    for name, _ in record.headers:
        if name in (TARGET, RELEASE, CANCEL, TXN_END):
            return name
    return None


def txn_of(record: DecodedRecord) -> int | None:
    """The producer id of a held message of an open transaction."""
    for name, value in record.headers:
        if name == TXN and value is not None and value.isdigit():
            return int(value)
    return None


def committed_copy(record: DecodedRecord) -> Record:
    """A held message of a committed transaction, held again without its transaction."""
    return Record(record.timestamp_ms, record.key, record.value,
                  tuple((name, value) for name, value in record.headers if name != TXN))


def txn_end_record(now_ms: int, producer_id: int, commit: bool) -> Record:
    return Record(now_ms, None, _TXN_END.pack(producer_id, int(commit)), ((TXN_END, b""),))


def txn_ended(value: bytes | None) -> tuple[int, bool] | None:
    if value is None or len(value) != _TXN_END.size:
        return None
    producer_id, commit = _TXN_END.unpack(value)
    return producer_id, bool(commit)


def released(record: DecodedRecord, now_ms: int) -> tuple[Target, Record] | None:
    """The target and the message as it goes there: the target header replaced by its id,
    stamped `now_ms`. None if the record is not a held message."""
    target = None
    headers = []
    for name, value in record.headers:
        if name == TARGET:
            target = Target.decode(value or b"")
        elif name != ID:        # held again after an earlier release: the new id replaces it
            headers.append((name, value))
    if target is None:
        return None
    headers.append((ID, str(record.offset).encode()))
    return target, Record(now_ms, record.key, record.value, tuple(headers))


def id_of(headers) -> int | None:
    for name, value in headers:
        if name == ID and value is not None and value.isdigit():
            return int(value)
    return None


def release_record(now_ms: int, payload: bytes) -> Record:
    return Record(now_ms, None, payload, ((RELEASE, b""),))


def cancel_record(now_ms: int, offset: int, due_ms: int, target: Target) -> Record:
    return Record(now_ms, None, _CANCEL.pack(offset, due_ms) + target.encode(), ((CANCEL, b""),))


def cancelled_key(value: bytes | None) -> tuple[int, int, Target] | None:
    """(offset, due, target) of a cancel record; None if malformed."""
    if value is None or len(value) < _CANCEL.size:
        return None
    offset, due = _CANCEL.unpack_from(value)
    return offset, due, Target.decode(value[_CANCEL.size:])

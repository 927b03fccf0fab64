"""How a held message is stored in the system topic, and what it is handed back as when due.

A held message is one record of the namespace's system topic:

    timestamp        the wall-clock ms at which it is due (so a scan reads due times without
                     decoding keys, values or headers)
    key, value       the message's own
    headers          first one header of the core, then the message's own (but an earlier
                     delayed.id, of a message held again after a release):
      delayed.target   "<kind>:<name>" (UTF-8): which kind of target routes it and to what, e.g.
                       "exchange:orders" (a queue namespace's exchange)

When due it is stamped with the time it is released and appended to its destinations with the
target header taken off and one header added at the end, so that a restart can tell whether it got
there (store.py):
      delayed.id       the held message's offset in the system topic, ASCII decimal
(Held messages stored before the target header came first have it after their own headers, and
may carry an earlier delayed.id: their release reads every header.)

The system topic also holds the store's own records, empty but for one header and their value:
      delayed.release  a release record (index_format.py)
      delayed.cancel   a cancelled message: its offset and due time (two big-endian i64), then
                       its target as delayed.target has it
      delayed.txn-end  the end of a producer's transaction: its id (big-endian i64), then 1 for a
                       commit or 0 for an abort; a commit's batch holds, before it, copies of the
                       transaction's held messages without their delayed.txn header

A held message of a transaction (Kafka) also carries, right after delayed.target,
      delayed.txn      the producer id, ASCII decimal: it waits, unindexed, for its transaction's end
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from core.records.builder import EncodedRecord, Record
from core.records.decoder import DecodedRecord, RecordTail, split_tail
from core.records.varint import encode_varint

TARGET = "delayed.target"
ID = "delayed.id"
RELEASE = "delayed.release"
CANCEL = "delayed.cancel"
TXN = "delayed.txn"
TXN_END = "delayed.txn-end"
_TARGET = TARGET.encode()
_ID = ID.encode()
_ID_NAME = encode_varint(len(_ID)) + _ID       # the id header as encoded, up to its value
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
    core = ((TARGET, target.encode()),) if txn is None else ((TARGET, target.encode()), (TXN, str(txn).encode()))
    return Record(due_ms, record.key, record.value, (*core, *(h for h in record.headers if h[0] != ID)))


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


def released(record: RecordTail, now_ms: int) -> tuple[bytes, EncodedRecord] | None:
    """The target (encoded: Target.decode reads it) and the message as it goes there: the target
    header taken off and its id added, stamped `now_ms`. None if the record is not a held message.
    Only the target header is decoded; the key, value and other headers are copied as they are."""
    head, count, first, rest = split_tail(record.tail, 1)
    if first and first[0][0] == _TARGET:     # first, as held_record puts it: the rest are the message's own
        target, count, kept = first[0][1] or b"", count - 1, rest
    else:                         # stored before it came first: every header is read
        head, count, headers, _ = split_tail(record.tail)
        target = next((value or b"" for name, value, _ in headers if name == _TARGET), None)
        if target is None:
            return None
        own = [encoded for name, _, encoded in headers if name not in (_TARGET, _ID)]
        count, kept = len(own), b"".join(own)
    message_id = str(record.offset).encode()
    return target, EncodedRecord(now_ms, b"".join((head, encode_varint(count + 1), kept, _ID_NAME,
                                                   encode_varint(len(message_id)), message_id)))


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

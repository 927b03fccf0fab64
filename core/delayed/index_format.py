"""The byte layouts of the delayed-delivery index: runs and checkpoints (values of records of the
namespace's `__delayed_index` topic) and release records (values of records of `__delayed_messages`).

Every integer is big-endian. A key is (due ms, offset of the held message in __delayed_messages).

Run: a sorted list of keys, written when the in-memory schedule overflows (or to make a checkpoint
self-contained); record key b"run"

    magic     4  b"DRUN"
    version   1  1
    count     4  u32
    keys      count * 16   (due i64, offset i64), ascending
    crc       4  u32, CRC-32C of everything before it

Checkpoint: what a restart starts from (record key b"checkpoint"; its offset is kept in the metadata
node of the namespace)

    magic       4  b"DCKP"
    version     1  1
    covers_to   8  i64  every hold below this offset of __delayed_messages is in a listed run or released
    replay_from 8  i64  where a restart replays from (<= covers_to: held messages of open transactions)
    runs        4  u32 count, then per run 52 bytes: index offset i64, first key (due i64, offset i64),
                   last key (due i64, offset i64), count u32, smallest offset i64
    frontier    4  u32 count, then per pair 24 bytes: below i64, due i64, offset i64  (see index.py)
    cancelled   4  u32 count, then per cancel 16 bytes: offset i64, due i64 (until the frontier passes it)
    counts      4  u32 count, then per target: length u16, UTF-8 target, pending i64
    next_seq    8  i64  the sequence number the next release record gets
    crc         4  u32, CRC-32C of everything before it

Release record (header `delayed.release` on an otherwise empty record of __delayed_messages): the
messages one delivery pass hands to their destinations, written (durably) before any of them is
appended there

    magic       4  b"DREL"
    version     1  1
    seq         8  i64  this record's sequence number (1, 2, ...)
    confirmed   8  i64  every release record with a smaller seq reached all its destinations
    frontier    24 below i64, due i64, offset i64  (this pass's pair, see index.py)
    offsets     4  u32 count, then count * 8: the offsets released (or dropped) by this pass
    counts      4  u32 count, then per target: length u16, UTF-8 target, released i64
    dests       4  u32 count, then per destination:
                   length u16, UTF-8 topic name, partition i32, high watermark before the pass i64,
                   u32 count, then count * 8: the offsets sent there
    crc         4  u32, CRC-32C of everything before it

A record whose magic, version, lengths or CRC do not check out raises CorruptIndex; the store then
rebuilds its index from __delayed_messages alone (the release records there keep it exact).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import crc32c

RUN_MAGIC = b"DRUN"
CHECKPOINT_MAGIC = b"DCKP"
RELEASE_MAGIC = b"DREL"
VERSION = 1

Key = tuple[int, int]      # (due ms, offset)

_HEAD = struct.Struct(">4sB")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_I64 = struct.Struct(">q")
_KEY = struct.Struct(">qq")
_RUN = struct.Struct(">qqqqqIq")
_PAIR = struct.Struct(">qqq")
_DEST = struct.Struct(">iq")


class CorruptIndex(ValueError):
    """A run, checkpoint or release record that does not decode."""


@dataclass(frozen=True, slots=True)
class RunInfo:
    index_offset: int      # where the run is stored in __delayed_index
    first: Key
    last: Key
    count: int
    min_offset: int        # the smallest offset among its keys (the system topic is kept from there)


@dataclass(slots=True)
class Checkpoint:
    covers_to: int
    replay_from: int
    runs: list[RunInfo]
    frontier: list[tuple[int, int, int]]
    cancelled: list[tuple[int, int]]      # (offset, due)
    counts: dict[str, int]
    next_seq: int


@dataclass(slots=True)
class Destination:
    topic: str
    partition: int
    high_watermark: int
    offsets: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Release:
    seq: int
    confirmed: int
    pair: tuple[int, int, int]
    offsets: list[int]
    counts: dict[str, int]
    destinations: list[Destination]


# --- writing ------------------------------------------------------------------------------------

def _sealed(parts: list[bytes]) -> bytes:
    body = b"".join(parts)
    return body + _U32.pack(crc32c.crc32c(body))


def _counts(counts: dict[str, int]) -> list[bytes]:
    parts = [_U32.pack(len(counts))]
    for target, count in counts.items():
        raw = target.encode("utf-8", "surrogateescape")
        parts += [_U16.pack(len(raw)), raw, _I64.pack(count)]
    return parts


def encode_run(keys: list[Key]) -> bytes:
    """`keys` sorted ascending."""
    parts = [_HEAD.pack(RUN_MAGIC, VERSION), _U32.pack(len(keys))]
    parts += [_KEY.pack(due, offset) for due, offset in keys]
    return _sealed(parts)


def encode_checkpoint(checkpoint: Checkpoint) -> bytes:
    parts = [_HEAD.pack(CHECKPOINT_MAGIC, VERSION), _I64.pack(checkpoint.covers_to),
             _I64.pack(checkpoint.replay_from), _U32.pack(len(checkpoint.runs))]
    parts += [_RUN.pack(run.index_offset, *run.first, *run.last, run.count, run.min_offset) for run in checkpoint.runs]
    parts.append(_U32.pack(len(checkpoint.frontier)))
    parts += [_PAIR.pack(*pair) for pair in checkpoint.frontier]
    parts.append(_U32.pack(len(checkpoint.cancelled)))
    parts += [_KEY.pack(offset, due) for offset, due in checkpoint.cancelled]
    parts += _counts(checkpoint.counts)
    parts.append(_I64.pack(checkpoint.next_seq))
    return _sealed(parts)


def encode_release(release: Release) -> bytes:
    parts = [_HEAD.pack(RELEASE_MAGIC, VERSION), _I64.pack(release.seq), _I64.pack(release.confirmed),
             _PAIR.pack(*release.pair), _U32.pack(len(release.offsets))]
    parts += [_I64.pack(offset) for offset in release.offsets]
    parts += _counts(release.counts)
    parts.append(_U32.pack(len(release.destinations)))
    for dest in release.destinations:
        raw = dest.topic.encode("utf-8", "surrogateescape")
        parts += [_U16.pack(len(raw)), raw, _DEST.pack(dest.partition, dest.high_watermark), _U32.pack(len(dest.offsets))]
        parts += [_I64.pack(offset) for offset in dest.offsets]
    return _sealed(parts)


# --- reading ------------------------------------------------------------------------------------

class _Reader:
    """Bounded reads over a checked body: every count is checked against the bytes left."""

    def __init__(self, raw: bytes, magic: bytes) -> None:
        if len(raw) < _HEAD.size + _U32.size:
            raise CorruptIndex("too short")
        body, (crc,) = raw[:-4], _U32.unpack_from(raw, len(raw) - 4)
        if crc32c.crc32c(body) != crc:
            raise CorruptIndex("CRC mismatch")
        found, version = _HEAD.unpack_from(body, 0)
        if found != magic:
            raise CorruptIndex(f"magic {found!r}, expected {magic!r}")
        if version != VERSION:
            raise CorruptIndex(f"unknown version {version}")
        self.body = body
        self.pos = _HEAD.size

    def take(self, fmt: struct.Struct) -> tuple:
        if self.pos + fmt.size > len(self.body):
            raise CorruptIndex("truncated")
        value = fmt.unpack_from(self.body, self.pos)
        self.pos += fmt.size
        return value

    def count(self, item_size: int) -> int:
        (count,) = self.take(_U32)
        if count * item_size > len(self.body) - self.pos:
            raise CorruptIndex(f"count {count} is more than the bytes left")
        return count

    def text(self) -> str:
        (length,) = self.take(_U16)
        if self.pos + length > len(self.body):
            raise CorruptIndex("truncated")
        raw = self.body[self.pos:self.pos + length]
        self.pos += length
        return raw.decode("utf-8", "surrogateescape")

    def counts(self) -> dict[str, int]:
        found = {}
        for _ in range(self.count(_U16.size + _I64.size)):
            target = self.text()
            found[target] = self.take(_I64)[0]
        return found

    def end(self) -> None:
        if self.pos != len(self.body):
            raise CorruptIndex(f"{len(self.body) - self.pos} bytes left over")


def decode_run(raw: bytes) -> list[Key]:
    reader = _Reader(raw, RUN_MAGIC)
    count = reader.count(_KEY.size)
    keys = list(_KEY.iter_unpack(reader.body[reader.pos:reader.pos + count * _KEY.size]))
    reader.pos += count * _KEY.size
    reader.end()
    if any(keys[i] > keys[i + 1] for i in range(len(keys) - 1)):
        raise CorruptIndex("run not sorted")
    return keys


def decode_checkpoint(raw: bytes) -> Checkpoint:
    reader = _Reader(raw, CHECKPOINT_MAGIC)
    (covers_to,) = reader.take(_I64)
    (replay_from,) = reader.take(_I64)
    runs = []
    for _ in range(reader.count(_RUN.size)):
        offset, first_due, first_off, last_due, last_off, count, min_offset = reader.take(_RUN)
        runs.append(RunInfo(offset, (first_due, first_off), (last_due, last_off), count, min_offset))
    frontier = [reader.take(_PAIR) for _ in range(reader.count(_PAIR.size))]
    cancelled = [reader.take(_KEY) for _ in range(reader.count(_KEY.size))]
    counts = reader.counts()
    (next_seq,) = reader.take(_I64)
    reader.end()
    return Checkpoint(covers_to, replay_from, runs, frontier, cancelled, counts, next_seq)


def decode_release(raw: bytes) -> Release:
    reader = _Reader(raw, RELEASE_MAGIC)
    (seq,) = reader.take(_I64)
    (confirmed,) = reader.take(_I64)
    pair = reader.take(_PAIR)
    offsets = [reader.take(_I64)[0] for _ in range(reader.count(_I64.size))]
    counts = reader.counts()
    destinations = []
    for _ in range(reader.count(_U16.size + _DEST.size + _U32.size)):
        topic = reader.text()
        partition, high_watermark = reader.take(_DEST)
        sent = [reader.take(_I64)[0] for _ in range(reader.count(_I64.size))]
        destinations.append(Destination(topic, partition, high_watermark, sent))
    reader.end()
    return Release(seq, confirmed, pair, offsets, counts, destinations)

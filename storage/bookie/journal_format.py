"""The journal's on-disk format, and the scan that validates it after a crash.

The journal is a sequence of segment files `journal/<segment id:016x>.log`, shared by every ledger.
They are written once, sequentially, and fsynced before any add they hold is acknowledged; sealed
segments double as the entry logs that reads are served from (see docs/ARCHITECTURE.md for why the
bookie does not copy entries a second time).

Segment header (16 bytes):

    offset  size  field
    0       4     magic            b"GWJL"
    4       2     format version   u16 big-endian, 1
    6       2     reserved         0
    8       8     segment id       u64 big-endian, equal to the file name

Records follow back to back:

    offset  size  field
    0       4     body length      u32 big-endian, 25 <= n <= MAX_BODY_BYTES
    4       4     crc              u32 big-endian, CRC-32C of the body
    8       1     kind             1 = entry, 2 = fence, 3 = ledger deleted
    9       8     ledger id        u64
    17      8     entry id         i64 (-1 for fence / delete)
    25      8     lac              i64, the writer's LastAddConfirmed piggybacked on the entry
    33      n-25  payload          the entry's bytes (empty for fence / delete)

The segment being written is preallocated (journal.py), so its file may go on in zeros after the
last record; sealed segments are cut back to their records.

Crash policy: a scan stops at the first record that is short, has an impossible length, a bad CRC
or an unknown kind, and reports how many bytes follow it and why. It never skips a bad record to
look for a later good one, so the halves of two different records can never be glued together.
The last segment is truncated at that point; anything after it was never acknowledged. Zeros from
a record boundary to the end of the file are the preallocated space (or writes that never reached
the disk): no record's length is 0, and a zero length followed by any other byte is reported as
damage like any other impossible length.
"""

from __future__ import annotations

import enum
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

MAGIC = b"GWJL"
FORMAT_VERSION = 1
SEGMENT_HEADER = struct.Struct(">4sHHQ")
RECORD_HEADER = struct.Struct(">II")      # body length, crc
BODY_FIXED = struct.Struct(">BQqq")       # kind, ledger, entry, lac
RECORD_OVERHEAD = RECORD_HEADER.size + BODY_FIXED.size
MAX_BODY_BYTES = BODY_FIXED.size + (64 << 20)


class RecordKind(enum.IntEnum):
    ENTRY = 1
    FENCE = 2
    LEDGER_DELETED = 3


def segment_name(segment_id: int) -> str:
    return f"{segment_id:016x}.log"


def segment_header(segment_id: int) -> bytes:
    return SEGMENT_HEADER.pack(MAGIC, FORMAT_VERSION, 0, segment_id)


def encode_record(kind: RecordKind, ledger_id: int, entry_id: int, lac: int, payload: bytes) -> tuple[bytes, bytes]:
    """Return (header+fixed fields, payload) so the payload is written without being copied."""
    head, *_ = encode_record_parts(kind, ledger_id, entry_id, lac, (payload,))
    return head, payload


def encode_record_parts(kind: RecordKind, ledger_id: int, entry_id: int, lac: int,
                        parts: tuple[bytes | memoryview, ...]) -> tuple[bytes | memoryview, ...]:
    """(header+fixed fields, *parts): a payload given in parts (the layers above each prepend a header)
    is checksummed part by part and written with writev, never joined into one copy."""
    fixed = BODY_FIXED.pack(kind, ledger_id, entry_id, lac)
    crc = crc32c.crc32c(fixed)
    size = len(fixed)
    for part in parts:
        crc = crc32c.crc32c(part, crc)
        size += len(part)
    return (RECORD_HEADER.pack(size, crc) + fixed, *parts)


@dataclass(frozen=True, slots=True)
class Record:
    kind: RecordKind
    ledger_id: int
    entry_id: int
    lac: int
    offset: int          # of the record's first byte in its segment
    size: int            # whole record, header included
    payload: bytes | memoryview


class BadSegment(Exception):
    """The segment header is missing or wrong: the file is not a journal segment of ours."""


@dataclass(frozen=True, slots=True)
class ScanStop:
    """Why a scan stopped before the end of the file."""

    offset: int
    dropped_bytes: int
    reason: str
    preallocated: bool = False    # only zeros follow: the segment's unused space, nothing was lost


def decode_record(buf: bytes | memoryview, offset: int = 0) -> Record:
    """Decode and verify one record held whole in `buf` (a read by position). Raises ValueError."""
    if len(buf) < RECORD_OVERHEAD:
        raise ValueError("short record")
    body_len, crc = RECORD_HEADER.unpack_from(buf, 0)
    if body_len != len(buf) - RECORD_HEADER.size:
        raise ValueError("record length does not match")
    body = memoryview(buf)[RECORD_HEADER.size:]
    if crc32c.crc32c(body) != crc:
        raise ValueError("record checksum mismatch")
    kind, ledger_id, entry_id, lac = BODY_FIXED.unpack_from(body, 0)
    # a view into `buf`, not a copy: reads hand it up unchanged to the Fetch response
    return Record(RecordKind(kind), ledger_id, entry_id, lac, offset, len(buf), body[BODY_FIXED.size:])


def read_segment_header(fd: int, segment_id: int) -> None:
    header = os.pread(fd, SEGMENT_HEADER.size, 0)
    if len(header) < SEGMENT_HEADER.size:
        raise BadSegment(f"segment {segment_id:x}: header truncated ({len(header)} bytes)")
    magic, version, _, stored_id = SEGMENT_HEADER.unpack(header)
    if magic != MAGIC:
        raise BadSegment(f"segment {segment_id:x}: bad magic {magic!r}")
    if version != FORMAT_VERSION:
        raise BadSegment(f"segment {segment_id:x}: unknown format version {version}")
    if stored_id != segment_id:
        raise BadSegment(f"segment {segment_id:x}: header names segment {stored_id:x}")


def scan(fd: int, start: int, file_size: int) -> Iterator[Record | ScanStop]:
    """Yield every valid record from `start`, then a ScanStop if the file does not end cleanly there.

    Reads in large chunks; a record is yielded only once its whole body passed the CRC check.
    """
    chunk_bytes = 4 << 20
    offset = start
    buf = b""
    buf_start = start
    while offset < file_size:
        rel = offset - buf_start
        if len(buf) - rel < RECORD_HEADER.size or len(buf) - rel < _peek_need(buf, rel):
            buf = os.pread(fd, max(chunk_bytes, _peek_need_at(fd, offset)), offset)
            buf_start, rel = offset, 0
        left = len(buf) - rel
        if left < RECORD_HEADER.size:
            yield ScanStop(offset, file_size - offset, "truncated record header")
            return
        body_len, crc = RECORD_HEADER.unpack_from(buf, rel)
        if body_len == 0 and _zeros_to_end(fd, offset, file_size):
            yield ScanStop(offset, file_size - offset, "preallocated space", preallocated=True)
            return
        if not BODY_FIXED.size <= body_len <= MAX_BODY_BYTES:
            yield ScanStop(offset, file_size - offset, f"impossible record length {body_len}")
            return
        if left < RECORD_HEADER.size + body_len:
            yield ScanStop(offset, file_size - offset, "truncated record body")
            return
        body = memoryview(buf)[rel + RECORD_HEADER.size: rel + RECORD_HEADER.size + body_len]
        if crc32c.crc32c(body) != crc:
            yield ScanStop(offset, file_size - offset, "record checksum mismatch")
            return
        kind, ledger_id, entry_id, lac = BODY_FIXED.unpack_from(body, 0)
        if kind not in RecordKind._value2member_map_:
            yield ScanStop(offset, file_size - offset, f"unknown record kind {kind}")
            return
        size = RECORD_HEADER.size + body_len
        yield Record(RecordKind(kind), ledger_id, entry_id, lac, offset, size, bytes(body[BODY_FIXED.size:]))
        offset += size


def _zeros_to_end(fd: int, offset: int, file_size: int) -> bool:
    chunk_bytes = 4 << 20
    while offset < file_size:
        chunk = os.pread(fd, min(chunk_bytes, file_size - offset), offset)
        if not chunk:
            break
        if chunk.count(0) != len(chunk):
            return False
        offset += len(chunk)
    return True


def _peek_need(buf: bytes, rel: int) -> int:
    """Bytes needed in `buf` from `rel` to hold the record starting there (header only if unknown)."""
    if len(buf) - rel < RECORD_HEADER.size:
        return RECORD_HEADER.size
    body_len = RECORD_HEADER.unpack_from(buf, rel)[0]
    return RECORD_HEADER.size + min(body_len, MAX_BODY_BYTES)


def _peek_need_at(fd: int, offset: int) -> int:
    header = os.pread(fd, RECORD_HEADER.size, offset)
    if len(header) < RECORD_HEADER.size:
        return RECORD_HEADER.size
    return RECORD_HEADER.size + min(RECORD_HEADER.unpack(header)[0], MAX_BODY_BYTES)

"""Decode a RecordBatch v2 into individual records (AMQP delivery, delayed messages, tests); or
read back delayed messages: some records of a batch, undecoded past their offsets
(`record_tails_at`, then `decode_tail` if their fields are needed), or only the offsets and times
of all (`decode_timestamps`).

Never used on the Kafka pass-through path. The record layout is documented in
builder.py. The input is untrusted, so every declared count and length is checked
against the bytes actually left before anything is allocated or looped over, and
every failure is an InvalidBatch: CorruptBatch when the bytes are damaged (CRC,
length, undecodable compressed data), InvalidRecord when intact bytes describe
impossible records.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import NamedTuple

from core.records.batch import (
    HEADER_SIZE,
    BatchHeader,
    CorruptBatch,
    InvalidRecord,
    check_batch,
)
from core.records.compression import (
    CorruptCompressedData,
    DecompressionTooLarge,
    decompress,
)
from core.records.varint import MalformedVarint, decode_varint, decode_varlong

DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024

# length, attributes, timestampDelta, offsetDelta, keyLength, valueLength and
# headersCount take at least one byte each.
_MIN_RECORD_BYTES = 7
# A header needs at least its key length and value length.
_MIN_HEADER_BYTES = 2


class DecodedRecord(NamedTuple):     # a tuple: one is made per record handed out
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def decode_batch(
    batch: bytes | bytearray | memoryview,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> tuple[BatchHeader, list[DecodedRecord]]:
    """Validate one batch and return its header and records with absolute offsets and times."""
    header = check_batch(batch)
    records = _records_section(memoryview(batch)[HEADER_SIZE:], header, max_decompressed_bytes)
    if header.records_count > len(records) // _MIN_RECORD_BYTES:
        raise InvalidRecord(
            f"{header.records_count} records cannot fit in {len(records)} bytes"
        )
    # Log-append-time batches carry the broker's time in maxTimestamp for every record.
    append_time = (
        header.max_timestamp
        if header.log_append_time
        else None
    )
    reader = _Reader(records)
    decoded = []
    for _ in range(header.records_count):
        decoded.append(_read_record(reader, header, append_time))
    if reader.remaining:
        raise InvalidRecord(f"{reader.remaining} bytes follow the last record")
    return header, decoded


class RecordTail(NamedTuple):
    """A record read without decoding what follows its offset delta."""

    offset: int
    timestamp_ms: int
    tail: bytes          # keyLength, key, valueLength, value, headersCount, headers, as encoded


def record_tails_at(
    batch: bytes | bytearray | memoryview,
    offsets: Sequence[int],
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[RecordTail]:
    """Validate one batch whose offset deltas are 0..n-1 (as build_batch writes them) and return
    its records at `offsets` (sorted), undecoded from their key on (decode_tail decodes that part):
    random access into a batch that only reads each record's length up to the last one wanted. A
    wanted record whose offset delta is not its position raises InvalidRecord."""
    header = check_batch(batch)
    records = _records_section(memoryview(batch)[HEADER_SIZE:], header, max_decompressed_bytes)
    base = header.base_offset
    count = min(header.records_count, len(records) // _MIN_RECORD_BYTES)
    wanted = offsets[bisect_left(offsets, base):bisect_left(offsets, base + count)]
    found: list[RecordTail] = []
    pos, size, index = 0, len(records), 0
    for offset in wanted:
        while index < offset - base:           # the records before it, stepped over by length
            length, pos = _zigzag(records, pos, decode_varint)
            if length < 0 or pos + length > size:
                raise InvalidRecord(f"length {length} does not fit in the {size - pos} bytes left")
            pos += length
            index += 1
        if index > offset - base:              # asked for twice
            continue
        length, pos = _zigzag(records, pos, decode_varint)
        end = pos + length
        if length < 1 or end > size:
            raise InvalidRecord(f"length {length} does not fit in the {size - pos} bytes left")
        timestamp_delta, pos = _zigzag(records, pos + 1, decode_varlong)     # byte 0: attributes
        offset_delta, pos = _zigzag(records, pos, decode_varint)
        if pos > end or offset_delta != index:
            raise InvalidRecord(f"record {index} has offset delta {offset_delta}")
        timestamp = header.max_timestamp if header.log_append_time else header.base_timestamp + timestamp_delta
        found.append(RecordTail(offset, timestamp, bytes(records[pos:end])))
        pos = end
        index += 1
    return found


def split_tail(tail: bytes, first: int | None = None
               ) -> tuple[bytes, int, list[tuple[bytes, bytes | None, bytes]], bytes]:
    """A record's tail cut before its headers (the key and value as encoded), its header count,
    its first `first` headers (all if None) as (name, value, the header as encoded), and the
    headers after those as encoded, unread: for rewriting headers without decoding the rest."""
    size = len(tail)
    pos = _after_nullable(tail, _after_nullable(tail, 0))
    head = tail[:pos]
    count, pos = _zigzag(tail, pos, decode_varint)
    if not 0 <= count <= (size - pos) // _MIN_HEADER_BYTES:
        raise InvalidRecord(f"{count} headers cannot fit in {size - pos} bytes")
    headers = []
    for _ in range(count if first is None else min(first, count)):
        start = pos
        name, pos = _nullable(tail, pos)
        if name is None:
            raise InvalidRecord("record header key is null")
        value, pos = _nullable(tail, pos)
        headers.append((name, value, tail[start:pos]))
    if first is None and pos != size:
        raise InvalidRecord(f"record declares {size} bytes but uses {pos}")
    return head, count, headers, tail[pos:]


def decode_tail(tail: bytes) -> tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]:
    """The key, value and headers of a record's tail (RecordTail.tail)."""
    return _fields(tail, 0)


def decode_timestamps(
    batch: bytes | bytearray | memoryview,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[tuple[int, int]]:
    """Validate one batch and return (offset, timestamp) of each record, without decoding keys,
    values or headers (scanning a log for due times)."""
    header = check_batch(batch)
    records = _records_section(memoryview(batch)[HEADER_SIZE:], header, max_decompressed_bytes)
    reader = _Reader(records)
    found = []
    for _ in range(min(header.records_count, len(records) // _MIN_RECORD_BYTES)):
        if not reader.remaining:
            break
        body = _Reader(reader.take(reader.varint()))
        body.take(1)
        timestamp_delta = body.varlong()
        offset = header.base_offset + body.varint()
        found.append((offset, header.max_timestamp if header.log_append_time
                      else header.base_timestamp + timestamp_delta))
    return found


def _records_section(
    payload: memoryview, header: BatchHeader, max_decompressed_bytes: int
) -> memoryview:
    if not header.is_compressed:
        return payload
    try:
        return memoryview(
            decompress(header.compression, payload, max_bytes=max_decompressed_bytes)
        )
    except DecompressionTooLarge as exc:
        raise InvalidRecord(f"records section is too large: {exc}") from exc
    except CorruptCompressedData as exc:
        raise CorruptBatch(f"records section does not decompress: {exc}") from exc


def _read_record(
    reader: _Reader, header: BatchHeader, append_time: int | None
) -> DecodedRecord:
    # Runs once per record handed out (AMQP deliveries, released delayed messages): the fields are
    # parsed with positions in locals rather than a reader method call each.
    record = bytes(reader.take(reader.varint()))     # slices of bytes are bytes: one copy per field
    size = len(record)
    if not size:
        raise InvalidRecord("record has no attributes byte")
    timestamp_delta, pos = _zigzag(record, 1, decode_varlong)     # byte 0: attributes, unused in v2
    offset_delta, pos = _zigzag(record, pos, decode_varint)
    key, value, headers = _fields(record, pos)
    return DecodedRecord(
        header.base_offset + offset_delta,
        append_time if append_time is not None else header.base_timestamp + timestamp_delta,
        key,
        value,
        headers,
    )


def _fields(record: bytes, pos: int) -> tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]:
    """Key, value and headers from `pos` to the end of `record`."""
    size = len(record)
    key, pos = _nullable(record, pos)
    value, pos = _nullable(record, pos)
    headers_count, pos = _zigzag(record, pos, decode_varint)
    if not 0 <= headers_count <= (size - pos) // _MIN_HEADER_BYTES:
        raise InvalidRecord(f"{headers_count} headers cannot fit in {size - pos} bytes")
    headers = []
    for _ in range(headers_count):
        name, pos = _nullable(record, pos)
        if name is None:
            raise InvalidRecord("record header key is null")
        try:
            name = name.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidRecord(f"record header key is not UTF-8: {exc}") from exc
        header_value, pos = _nullable(record, pos)
        headers.append((name, header_value))
    if pos != size:
        raise InvalidRecord(f"record declares {size} bytes but uses {pos}")
    return key, value, tuple(headers)


def _zigzag(buf: bytes | memoryview, pos: int, decode) -> tuple[int, int]:
    """The varint (decode_varint) or varlong (decode_varlong) at `pos` and the position after it.
    One and two bytes (14 bits: no overflow) are decoded here, the rest by `decode`."""
    if pos + 1 < len(buf):
        byte = buf[pos]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), pos + 1
        if (high := buf[pos + 1]) < 0x80:
            raw = (byte & 0x7F) | (high << 7)
            return (raw >> 1) ^ -(raw & 1), pos + 2
    elif pos < len(buf) and (byte := buf[pos]) < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    try:
        return decode(buf, pos)
    except MalformedVarint as exc:
        raise InvalidRecord(f"malformed record: {exc}") from exc


def _after_nullable(buf: bytes, pos: int) -> int:
    """The position after the length-prefixed bytes (-1: null) at `pos`."""
    length, pos = _zigzag(buf, pos, decode_varint)
    if length < -1 or pos + length > len(buf):
        raise InvalidRecord(f"length {length} does not fit in the {len(buf) - pos} bytes left")
    return pos + max(length, 0)


def _nullable(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    """Length-prefixed bytes (-1: null) at `pos`, and the position after them."""
    length, pos = _zigzag(buf, pos, decode_varint)
    if length == -1:
        return None, pos
    end = pos + length
    if length < 0 or end > len(buf):
        raise InvalidRecord(f"length {length} does not fit in the {len(buf) - pos} bytes left")
    return buf[pos:end], end


class _Reader:
    """A cursor over a bounded slice; every read is checked and fails as InvalidRecord."""

    __slots__ = ("_buf", "_pos")

    def __init__(self, buf: memoryview) -> None:
        self._buf = buf
        self._pos = 0

    @property
    def position(self) -> int:
        return self._pos

    @position.setter
    def position(self, pos: int) -> None:
        self._pos = pos

    @property
    def remaining(self) -> int:
        return len(self._buf) - self._pos

    def varint(self) -> int:
        value, self._pos = _zigzag(self._buf, self._pos, decode_varint)
        return value

    def varlong(self) -> int:
        value, self._pos = _zigzag(self._buf, self._pos, decode_varlong)
        return value

    def take(self, length: int) -> memoryview:
        if not 0 <= length <= self.remaining:
            raise InvalidRecord(f"length {length} does not fit in the {self.remaining} bytes left")
        start = self._pos
        self._pos += length
        return self._buf[start : self._pos]

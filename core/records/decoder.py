"""Decode a RecordBatch v2 into individual records (AMQP delivery, delayed messages, tests), or
only some of them (`decode_records_at`) or only their offsets and times (`decode_timestamps`):
reading delayed messages back.

Never used on the Kafka pass-through path. The record layout is documented in
builder.py. The input is untrusted, so every declared count and length is checked
against the bytes actually left before anything is allocated or looped over, and
every failure is an InvalidBatch: CorruptBatch when the bytes are damaged (CRC,
length, undecodable compressed data), InvalidRecord when intact bytes describe
impossible records.
"""

from __future__ import annotations

from collections.abc import Collection
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


def decode_records_at(
    batch: bytes | bytearray | memoryview,
    offsets: Collection[int],
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    dense: bool = False,
) -> list[DecodedRecord]:
    """Validate one batch and decode only its records whose offsets are in ``offsets``; the
    others are stepped over by their length prefix (random access into large batches). `dense`:
    the batch's offset deltas are 0..n-1 (as build_batch writes them), so a record's offset is
    known from its position and the others are stepped over by their length alone (a record that
    says otherwise raises InvalidRecord)."""
    header = check_batch(batch)
    records = _records_section(memoryview(batch)[HEADER_SIZE:], header, max_decompressed_bytes)
    append_time = (
        header.max_timestamp
        if header.log_append_time
        else None
    )
    reader = _Reader(records)
    decoded = []
    if dense:
        count = min(header.records_count, len(records) // _MIN_RECORD_BYTES)
        wanted = [index for index in range(count) if header.base_offset + index in offsets]
        if not wanted:
            return decoded
        wanted_set = set(wanted)
        pos, size = 0, len(records)
        for index in range(wanted[-1] + 1):      # nothing past the last wanted record is read
            if pos >= size:
                break
            if index in wanted_set:
                reader.position = pos
                record = _read_record(reader, header, append_time)
                pos = reader.position
                if record.offset != header.base_offset + index:
                    raise InvalidRecord(f"record {index} has offset delta {record.offset - header.base_offset}")
                decoded.append(record)
            else:                                # stepped over by its length alone
                length, pos = _zigzag(records, pos, decode_varint)
                if length < 0 or pos + length > size:
                    raise InvalidRecord(f"length {length} does not fit in the {size - pos} bytes left")
                pos += length
        return decoded
    for _ in range(min(header.records_count, len(records) // _MIN_RECORD_BYTES)):
        if not reader.remaining:
            break
        start = reader.position
        length = reader.varint()
        body = _Reader(reader.take(length))
        body.take(1)
        body.varlong()
        if header.base_offset + body.varint() in offsets:
            reader.position = start
            decoded.append(_read_record(reader, header, append_time))
    return decoded


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
    return DecodedRecord(
        header.base_offset + offset_delta,
        append_time if append_time is not None else header.base_timestamp + timestamp_delta,
        key,
        value,
        tuple(headers),
    )


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

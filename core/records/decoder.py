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
from dataclasses import dataclass

from core.records.batch import (
    HEADER_SIZE,
    BatchHeader,
    CorruptBatch,
    InvalidRecord,
    TimestampType,
    check_batch,
)
from core.records.compression import (
    Compression,
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


@dataclass(frozen=True, slots=True)
class DecodedRecord:
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
        if header.timestamp_type is TimestampType.LOG_APPEND_TIME
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
        if header.timestamp_type is TimestampType.LOG_APPEND_TIME
        else None
    )
    reader = _Reader(records)
    decoded = []
    if dense:
        for index in range(min(header.records_count, len(records) // _MIN_RECORD_BYTES)):
            if not reader.remaining:
                break
            if header.base_offset + index in offsets:
                record = _read_record(reader, header, append_time)
                if record.offset != header.base_offset + index:
                    raise InvalidRecord(f"record {index} has offset delta {record.offset - header.base_offset}")
                decoded.append(record)
            else:
                reader.take(reader.varint())
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
        found.append((offset, header.max_timestamp if header.timestamp_type is TimestampType.LOG_APPEND_TIME
                      else header.base_timestamp + timestamp_delta))
    return found


def _records_section(
    payload: memoryview, header: BatchHeader, max_decompressed_bytes: int
) -> memoryview:
    if header.compression is Compression.NONE:
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
    length = reader.varint()
    record = _Reader(reader.take(length))
    record.take(1)  # attributes: unused in v2
    timestamp_delta = record.varlong()
    offset_delta = record.varint()
    key = record.nullable_bytes()
    value = record.nullable_bytes()
    headers_count = record.varint()
    if not 0 <= headers_count <= record.remaining // _MIN_HEADER_BYTES:
        raise InvalidRecord(f"{headers_count} headers cannot fit in {record.remaining} bytes")
    headers = tuple(_read_header(record) for _ in range(headers_count))
    if record.remaining:
        raise InvalidRecord(f"record declares {length} bytes but uses {length - record.remaining}")
    return DecodedRecord(
        offset=header.base_offset + offset_delta,
        timestamp_ms=(
            append_time if append_time is not None else header.base_timestamp + timestamp_delta
        ),
        key=key,
        value=value,
        headers=headers,
    )


def _read_header(record: _Reader) -> tuple[str, bytes | None]:
    key = record.nullable_bytes()
    if key is None:
        raise InvalidRecord("record header key is null")
    try:
        name = key.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRecord(f"record header key is not UTF-8: {exc}") from exc
    return name, record.nullable_bytes()


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
        # Most lengths and deltas fit in one byte: decoded here, without the general decoder's call.
        pos = self._pos
        if pos < len(self._buf) and (byte := self._buf[pos]) < 0x80:
            self._pos = pos + 1
            return (byte >> 1) ^ -(byte & 1)
        try:
            value, self._pos = decode_varint(self._buf, pos)
        except MalformedVarint as exc:
            raise InvalidRecord(f"malformed record: {exc}") from exc
        return value

    def varlong(self) -> int:
        pos = self._pos
        if pos < len(self._buf) and (byte := self._buf[pos]) < 0x80:
            self._pos = pos + 1
            return (byte >> 1) ^ -(byte & 1)
        try:
            value, self._pos = decode_varlong(self._buf, pos)
        except MalformedVarint as exc:
            raise InvalidRecord(f"malformed record: {exc}") from exc
        return value

    def take(self, length: int) -> memoryview:
        if not 0 <= length <= self.remaining:
            raise InvalidRecord(f"length {length} does not fit in the {self.remaining} bytes left")
        start = self._pos
        self._pos += length
        return self._buf[start : self._pos]

    def nullable_bytes(self) -> bytes | None:
        length = self.varint()
        if length == -1:
            return None
        return bytes(self.take(length))

"""Build a RecordBatch v2 from individual records (AMQP publishes, delayed messages, tests).

The Kafka produce path never comes here: producers send finished batches and
batch.py passes them through. The batch header is documented in batch.py; the
records section is ``recordsCount`` records, compressed as one block when the
batch has a codec. Each record is:

    length          varint   bytes of the record after this field
    attributes      int8     unused, 0
    timestampDelta  varlong  ms since the batch's baseTimestamp
    offsetDelta     varint   offset since the batch's baseOffset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headersCount    varint
    headers         headersCount times:
        headerKeyLength    varint   never null
        headerKey          bytes    UTF-8
        headerValueLength  varint   -1 for a null value
        headerValue        bytes
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import crc32c

from core.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TimestampType,
)
from core.records.compression import Compression, compress
from core.records.decoder import decode_tail
from core.records.varint import encode_varint, encode_varlong

_CRC = struct.Struct(">I")
_NULL_LENGTH = encode_varint(-1)


@dataclass(slots=True)   # not frozen: a frozen one costs ~2 µs more to build, once per record
class Record:
    """One record to put in a batch; its offset is its position in the batch."""

    timestamp_ms: int
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class EncodedRecord:
    """A record whose key, value and headers are already encoded (a RecordTail's tail): batched
    without encoding them again, and decoded only when one of them is read (routing, say)."""

    __slots__ = ("timestamp_ms", "tail", "_fields")

    def __init__(self, timestamp_ms: int, tail: bytes) -> None:
        self.timestamp_ms = timestamp_ms
        self.tail = tail
        self._fields: tuple | None = None

    @property
    def key(self) -> bytes | None:
        return self._decoded()[0]

    @property
    def value(self) -> bytes | None:
        return self._decoded()[1]

    @property
    def headers(self) -> tuple[tuple[str, bytes | None], ...]:
        return self._decoded()[2]

    def _decoded(self) -> tuple:
        if self._fields is None:
            self._fields = decode_tail(self.tail)
        return self._fields


def build_batch(
    records: Sequence[Record | EncodedRecord],
    *,
    base_offset: int = 0,
    compression: Compression | int = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode ``records`` as one batch with offset deltas 0..n-1 and a correct CRC-32C."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    compression = Compression(compression)
    base_timestamp = records[0].timestamp_ms
    body = b"".join(
        _encode_record(record, offset_delta, base_timestamp)
        for offset_delta, record in enumerate(records)
    )
    if compression is not Compression.NONE:
        body = compress(compression, body)
    attributes = (
        compression
        | TimestampType(timestamp_type) << 3
        | is_transactional << 4
        | is_control << 5
    )
    batch = bytearray(HEADER_SIZE + len(body))
    HEADER.pack_into(
        batch,
        0,
        base_offset,
        len(batch) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        0,  # crc, filled in below once the bytes it covers are in place
        attributes,
        len(records) - 1,
        base_timestamp,
        max(record.timestamp_ms for record in records),
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    batch[HEADER_SIZE:] = body
    _CRC.pack_into(batch, CRC_OFFSET, crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def _encode_record(record: Record | EncodedRecord, offset_delta: int, base_timestamp: int) -> bytes:
    if type(record) is EncodedRecord:
        body = b"".join((b"\x00", encode_varlong(record.timestamp_ms - base_timestamp), encode_varint(offset_delta),
                         record.tail))
        return encode_varint(len(body)) + body
    key, value, headers = record.key, record.value, record.headers
    parts = [
        b"\x00",  # attributes
        encode_varlong(record.timestamp_ms - base_timestamp),
        encode_varint(offset_delta),
        _NULL_LENGTH if key is None else encode_varint(len(key)), key or b"",
        _NULL_LENGTH if value is None else encode_varint(len(value)), value or b"",
        encode_varint(len(headers)),
    ]
    for name, header in headers:
        parts += (_header_key(name), _NULL_LENGTH if header is None else encode_varint(len(header)), header or b"")
    body = b"".join(parts)
    return encode_varint(len(body)) + body


_HEADER_KEYS: dict[str, bytes] = {}   # name -> its length and UTF-8 bytes; a few names serve most records
_HEADER_KEYS_MAX = 1024


def _header_key(key: str) -> bytes:
    encoded = _HEADER_KEYS.get(key)
    if encoded is None:
        raw = key.encode("utf-8")
        encoded = encode_varint(len(raw)) + raw
        if len(_HEADER_KEYS) < _HEADER_KEYS_MAX:
            _HEADER_KEYS[key] = encoded
    return encoded

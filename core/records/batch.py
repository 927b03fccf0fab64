"""Kafka RecordBatch v2 (magic 2) as an opaque, validated view: the produce hot path.

Nothing here looks at individual records; that is decoder.py's job. All integers
are big-endian; a batch is a 61-byte header followed by the (maybe compressed)
records.

    offset  size  field
         0     8  baseOffset            int64   offset of the first record; set by the broker
         8     4  batchLength           int32   bytes after this field (= total size - 12)
        12     4  partitionLeaderEpoch  int32   set by the broker
        16     1  magic                 int8    2
        17     4  crc                   uint32  CRC-32C of bytes 21..end (attributes onwards)
        21     2  attributes            int16   bits 0-2 compression (0 none, 1 gzip,
                                                2 snappy, 3 lz4, 4 zstd); bit 3 timestamp
                                                type (0 create, 1 log append); bit 4
                                                transactional; bit 5 control batch;
                                                bit 6 has delete horizon
        23     4  lastOffsetDelta       int32   offset delta of the last record
        27     8  baseTimestamp         int64   ms; record timestamps are deltas from it
        35     8  maxTimestamp          int64   ms
        43     8  producerId            int64   -1 when not idempotent
        51     2  producerEpoch         int16
        53     4  baseSequence          int32
        57     4  recordsCount          int32
        61     -  records

Because the CRC starts at attributes, the broker can rewrite baseOffset and
partitionLeaderEpoch without recomputing it.

Errors split the way Kafka answers them: CorruptBatch for bytes that are damaged
(bad CRC, truncated, length mismatch; Kafka CORRUPT_MESSAGE) and InvalidRecord for
intact bytes that say something unacceptable (wrong magic, inconsistent counts;
Kafka INVALID_RECORD).
"""

from __future__ import annotations

import struct
from enum import Enum, IntEnum
from typing import ClassVar, NamedTuple

import crc32c

from core.records.compression import Compression

MAGIC = 2
NO_LEADER_EPOCH = -1   # "unknown": what batches stored before leader epochs were kept carry
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count
BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_UINT32 = struct.Struct(">I")
_COMPRESSION_MASK = 0x07
_MAX_CODEC = max(Compression)
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class BatchErrorReason(Enum):
    CORRUPT = "corrupt"  # Kafka CORRUPT_MESSAGE
    INVALID = "invalid"  # Kafka INVALID_RECORD


class InvalidBatch(ValueError):
    """A RecordBatch was rejected; ``reason`` says whether it was damaged or unacceptable."""

    reason: ClassVar[BatchErrorReason]


class CorruptBatch(InvalidBatch):
    reason = BatchErrorReason.CORRUPT


class InvalidRecord(InvalidBatch):
    reason = BatchErrorReason.INVALID


class BatchHeader(NamedTuple):      # a tuple: made for every batch read, so it must be cheap
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> Compression:
        """The codec; raises ValueError for codes 5-7, which check_batch rejects."""
        return Compression(self.attributes & _COMPRESSION_MASK)

    @property
    def is_compressed(self) -> bool:
        return bool(self.attributes & _COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(bool(self.attributes & _TIMESTAMP_TYPE_BIT))

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & _TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def record_count(self) -> int:
        return self.records_count

    @property
    def next_offset_delta(self) -> int:
        """Offsets this batch takes up, i.e. how far the log end moves when it is appended."""
        return self.last_offset_delta + 1

    @property
    def size_bytes(self) -> int:
        return LOG_OVERHEAD + self.batch_length


def read_header(buf: bytes | bytearray | memoryview) -> BatchHeader:
    """Unpack the 61-byte header at the start of ``buf``; no validation beyond its length."""
    if len(buf) < HEADER_SIZE:
        raise CorruptBatch(f"record batch header needs {HEADER_SIZE} bytes, got {len(buf)}")
    return BatchHeader._make(HEADER.unpack_from(buf))


def check_batch(batch: bytes | bytearray | memoryview) -> BatchHeader:
    """Validate exactly one complete batch (magic, length, CRC, counts); return its header."""
    view = memoryview(batch)
    size = _declared_size(view)
    if size != len(view):
        raise CorruptBatch(f"record batch declares {size} bytes but {len(view)} were given")
    header = read_header(view)
    if crc32c.crc32c(view[ATTRIBUTES_OFFSET:]) != header.crc:
        raise CorruptBatch("record batch CRC-32C does not match its contents")
    codec = header.attributes & _COMPRESSION_MASK
    if codec > _MAX_CODEC:
        raise InvalidRecord(f"unknown compression codec {codec}")
    # Kafka requires at least one record and contiguous offset deltas on produce.
    if header.records_count < 1:
        raise InvalidRecord(f"record batch declares {header.records_count} records")
    if header.last_offset_delta != header.records_count - 1:
        raise InvalidRecord(
            f"lastOffsetDelta {header.last_offset_delta} does not match "
            f"{header.records_count} records"
        )
    return header


def split_batches(records: bytes | bytearray | memoryview) -> list[memoryview]:
    """Split a Produce partition's records field into validated batches (zero-copy views)."""
    view = memoryview(records)
    if not view:
        raise InvalidRecord("records field is empty")
    batches = []
    while view:
        batch = view[: _declared_size(view)]
        check_batch(batch)
        batches.append(batch)
        view = view[len(batch) :]
    return batches


def batch_views(records: bytes | bytearray | memoryview) -> list[memoryview]:
    """Split stored records into batches by their declared sizes alone, for callers that check each
    batch as they decode it (decoder.py does), so that no CRC is computed twice."""
    view = memoryview(records)
    batches = []
    while view:
        batch = view[: _declared_size(view)]
        batches.append(batch)
        view = view[len(batch) :]
    return batches


def with_base_offset(batch: bytes | bytearray | memoryview, base_offset: int) -> bytes:
    """A copy of ``batch`` with baseOffset replaced; the CRC stays valid."""
    view = _header_view(batch)
    return _INT64.pack(base_offset) + view[BASE_OFFSET_OFFSET + _INT64.size :]


def with_offset_and_epoch(batch: bytes | bytearray | memoryview, base_offset: int, epoch: int) -> bytes:
    """A copy with baseOffset and partitionLeaderEpoch replaced (one copy; the CRC stays valid)."""
    view = _header_view(batch)
    return b"".join((_INT64.pack(base_offset), view[BATCH_LENGTH_OFFSET:PARTITION_LEADER_EPOCH_OFFSET],
                     _INT32.pack(epoch), view[PARTITION_LEADER_EPOCH_OFFSET + _INT32.size:]))


def with_partition_leader_epoch(batch: bytes | bytearray | memoryview, epoch: int) -> bytes:
    """A copy of ``batch`` with partitionLeaderEpoch replaced; the CRC stays valid."""
    view = _header_view(batch)
    start = PARTITION_LEADER_EPOCH_OFFSET
    return b"".join((view[:start], _INT32.pack(epoch), view[start + _INT32.size :]))


def with_log_append_time(batch: bytes | bytearray | memoryview, base_offset: int, now_ms: int,
                         epoch: int = NO_LEADER_EPOCH) -> bytes:
    """A copy stamped by the broker (topic message.timestamp.type=LogAppendTime): the timestamp-type
    bit set, maxTimestamp = now, the CRC recomputed. Readers take every record's timestamp from
    maxTimestamp then, as Kafka does."""
    stamped = bytearray(with_offset_and_epoch(batch, base_offset, epoch))
    (attributes,) = _INT16.unpack_from(stamped, ATTRIBUTES_OFFSET)
    _INT16.pack_into(stamped, ATTRIBUTES_OFFSET, attributes | _TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(stamped, MAX_TIMESTAMP_OFFSET, now_ms)
    _UINT32.pack_into(stamped, CRC_OFFSET, crc32c.crc32c(memoryview(stamped)[ATTRIBUTES_OFFSET:]))
    return bytes(stamped)


def _declared_size(view: memoryview) -> int:
    """Size of the batch starting at ``view[0]``, checked against magic and the bytes present."""
    if len(view) <= MAGIC_OFFSET:
        raise CorruptBatch(f"truncated record batch: {len(view)} bytes")
    (magic,) = _INT8.unpack_from(view, MAGIC_OFFSET)
    if magic != MAGIC:
        raise InvalidRecord(f"only magic {MAGIC} record batches are accepted, got magic {magic}")
    (batch_length,) = _INT32.unpack_from(view, BATCH_LENGTH_OFFSET)
    if batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptBatch(f"batchLength {batch_length} is shorter than a batch header")
    size = LOG_OVERHEAD + batch_length
    if size > len(view):
        raise CorruptBatch(f"truncated record batch: declares {size} bytes, {len(view)} present")
    return size


def _header_view(batch: bytes | bytearray | memoryview) -> memoryview:
    view = memoryview(batch)
    if len(view) < HEADER_SIZE:
        raise CorruptBatch(f"record batch header needs {HEADER_SIZE} bytes, got {len(view)}")
    return view

"""The pass-through view: header fields, splitting, validation and offset patching."""

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.records.batch import (
    HEADER_SIZE,
    BatchErrorReason,
    CorruptBatch,
    InvalidBatch,
    InvalidRecord,
    TimestampType,
    check_batch,
    read_header,
    split_batches,
    with_base_offset,
    with_partition_leader_epoch,
)
from core.records.builder import Record, build_batch
from core.records.compression import Compression

RECORDS = [Record(1_000 + i, b"key", b"value %d" % i, (("h", b"v"),)) for i in range(3)]


def reseal(batch: bytes | bytearray) -> bytes:
    """Recompute the CRC so a forged field reaches the checks behind it."""
    batch = bytearray(batch)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def patched(batch: bytes, fmt: str, offset: int, value: int) -> bytes:
    batch = bytearray(batch)
    struct.pack_into(fmt, batch, offset, value)
    return bytes(batch)


def test_header_fields_and_flags():
    batch = build_batch(
        RECORDS,
        base_offset=42,
        compression=Compression.LZ4,
        producer_id=7,
        producer_epoch=3,
        base_sequence=11,
        is_transactional=True,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        partition_leader_epoch=5,
    )
    header = read_header(batch)
    assert header == check_batch(batch)
    assert (header.base_offset, header.partition_leader_epoch, header.magic) == (42, 5, 2)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, 11)
    assert (header.base_timestamp, header.max_timestamp) == (1_000, 1_002)
    assert header.compression is Compression.LZ4
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.is_transactional and not header.is_control
    assert header.record_count == header.records_count == 3
    assert header.last_offset_delta == 2 and header.next_offset_delta == 3
    assert header.size_bytes == len(batch) == header.batch_length + 12


def test_control_flag():
    header = read_header(build_batch(RECORDS[:1], is_control=True, is_transactional=True))
    assert header.is_control and header.is_transactional


def test_split_returns_zero_copy_views_of_each_batch():
    first = build_batch(RECORDS)
    second = build_batch(RECORDS[:1], compression=Compression.ZSTD)
    records = first + second
    batches = split_batches(records)
    assert [bytes(batch) for batch in batches] == [first, second]
    assert all(batch.obj is records for batch in batches)


def test_empty_records_field_is_invalid():
    with pytest.raises(InvalidRecord, match="empty"):
        split_batches(b"")


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_other_magic_is_invalid_record(magic):
    batch = patched(build_batch(RECORDS), ">b", 16, magic)
    with pytest.raises(InvalidRecord, match="only magic 2"):
        split_batches(batch)
    assert InvalidRecord.reason is BatchErrorReason.INVALID


def test_legacy_message_set_is_invalid_record():
    # A v1 message: offset, size, crc, magic 1, attributes, timestamp, key -1, value -1.
    message = struct.pack(">IbbqiI", 0, 1, 0, 0, -1, 0xFFFFFFFF)
    with pytest.raises(InvalidRecord, match="only magic 2"):
        split_batches(struct.pack(">qi", 0, len(message)) + message)


def test_flipping_any_byte_from_the_crc_onwards_is_corrupt():
    batch = build_batch(RECORDS, compression=Compression.GZIP)
    for index in range(17, len(batch)):
        damaged = bytearray(batch)
        damaged[index] ^= 0x01
        with pytest.raises(CorruptBatch):
            split_batches(bytes(damaged))
    assert CorruptBatch.reason is BatchErrorReason.CORRUPT


def test_every_truncation_is_corrupt():
    batch = build_batch(RECORDS)
    for cut in range(1, len(batch)):
        with pytest.raises(CorruptBatch, match="truncated"):
            split_batches(batch[:cut])


def test_trailing_partial_batch_is_corrupt():
    batch = build_batch(RECORDS)
    with pytest.raises(CorruptBatch, match="truncated"):
        split_batches(batch + batch[:30])


def test_batch_length_shorter_than_a_header_is_corrupt():
    with pytest.raises(CorruptBatch, match="shorter than a batch header"):
        split_batches(patched(build_batch(RECORDS), ">i", 8, 10))


def test_check_batch_wants_exactly_one_batch():
    batch = build_batch(RECORDS)
    with pytest.raises(CorruptBatch, match="declares"):
        check_batch(batch + b"\x00")


def test_huge_declared_length_is_corrupt_without_reading():
    with pytest.raises(CorruptBatch, match="truncated"):
        split_batches(patched(build_batch(RECORDS), ">i", 8, 2**31 - 1))


@pytest.mark.parametrize(
    ("count", "last_offset_delta"),
    [(0, -1), (-5, -6), (3, 5), (2**31 - 1, 2), (-(2**31), 2)],
)
def test_inconsistent_counts_are_invalid_record(count, last_offset_delta):
    batch = patched(build_batch(RECORDS), ">i", 57, count)
    batch = reseal(patched(batch, ">i", 23, last_offset_delta))
    with pytest.raises(InvalidRecord, match="records"):
        split_batches(batch)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_is_invalid_record(codec):
    batch = reseal(patched(build_batch(RECORDS), ">h", 21, codec))
    with pytest.raises(InvalidRecord, match="compression codec"):
        split_batches(batch)


@pytest.mark.parametrize(
    ("patch", "field", "value"),
    [
        (with_base_offset, "base_offset", 2**40),
        (with_partition_leader_epoch, "partition_leader_epoch", 77),
    ],
)
def test_header_patches_leave_the_crc_valid(patch, field, value):
    batch = build_batch(RECORDS)
    rewritten = patch(memoryview(batch), value)
    assert isinstance(rewritten, bytes)
    assert len(rewritten) == len(batch)
    assert getattr(check_batch(rewritten), field) == value
    assert rewritten[21:] == batch[21:]


@pytest.mark.parametrize("patch", [with_base_offset, with_partition_leader_epoch])
def test_header_patches_refuse_a_fragment(patch):
    with pytest.raises(CorruptBatch):
        patch(b"\x00" * (HEADER_SIZE - 1), 0)


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_split_garbage_only_raises_invalid_batch(data):
    try:
        split_batches(data)
    except InvalidBatch:
        pass


@settings(max_examples=200)
@given(st.binary(max_size=80), st.integers(0, 2**31 - 1))
def test_split_garbage_behind_a_plausible_prefix_only_raises_invalid_batch(tail, length):
    try:
        split_batches(struct.pack(">qiib", 0, length, 0, 2) + tail)
    except InvalidBatch:
        pass

"""Building and decoding individual records, and decoding hostile batches."""

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.records.batch import (
    HEADER,
    HEADER_SIZE,
    CorruptBatch,
    InvalidBatch,
    InvalidRecord,
    TimestampType,
    check_batch,
    split_batches,
    with_base_offset,
)
from core.records.builder import Record, build_batch
from core.records.compression import Compression, DecompressionTooLarge, compress
from core.records.decoder import DecodedRecord, decode_batch
from core.records.varint import encode_varint, encode_varlong

MiB = 1024 * 1024

records_strategy = st.builds(
    Record,
    timestamp_ms=st.integers(0, 2**45),
    key=st.none() | st.binary(max_size=40),
    value=st.none() | st.binary(max_size=200),
    headers=st.lists(
        st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=20)), max_size=3
    ).map(tuple),
)
codecs = st.sampled_from(list(Compression))


def forge(body: bytes, count: int, *, compression: int = 0, attributes: int = 0) -> bytes:
    """A batch with a valid header and CRC around an arbitrary records section."""
    header = HEADER.pack(
        0, HEADER_SIZE - 12 + len(body), -1, 2, 0,
        compression | attributes, count - 1, 0, 0, -1, -1, -1, count,
    )  # fmt: skip
    batch = bytearray(header + body)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def record_bytes(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return encode_varint(len(body)) + body


def plain_record(key: bytes = encode_varint(-1), headers: bytes = encode_varint(0)) -> bytes:
    """attributes, timestampDelta 0, offsetDelta 0, the given key, null value, headers."""
    null = encode_varint(-1)
    return record_bytes(b"\x00", encode_varlong(0), encode_varint(0), key, null, headers)


def expected(records, base_offset):
    return [
        DecodedRecord(base_offset + i, r.timestamp_ms, r.key, r.value, r.headers)
        for i, r in enumerate(records)
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.lists(records_strategy, min_size=1, max_size=8), codecs),
        min_size=1,
        max_size=3,
    ),
    st.integers(0, 2**62),
)
def test_build_split_decode_round_trip(batches, base_offset):
    built = [
        build_batch(records, base_offset=base_offset, compression=codec)
        for records, codec in batches
    ]
    views = split_batches(b"".join(built))
    assert [bytes(view) for view in views] == built
    for view, (records, codec) in zip(views, batches, strict=True):
        header, decoded = decode_batch(view)
        assert header.compression is codec
        assert header.max_timestamp == max(r.timestamp_ms for r in records)
        assert decoded == expected(records, base_offset)


@settings(max_examples=60, deadline=None)
@given(st.lists(records_strategy, min_size=1, max_size=5), codecs, st.integers(0, 2**62))
def test_with_base_offset_shifts_decoded_offsets(records, codec, new_base):
    batch = with_base_offset(build_batch(records, compression=codec), new_base)
    check_batch(batch)
    _, decoded = decode_batch(batch)
    assert decoded == expected(records, new_base)


def test_producer_fields_survive_the_round_trip():
    batch = build_batch(
        [Record(5, value=b"v")],
        producer_id=9,
        producer_epoch=2,
        base_sequence=40,
        is_transactional=True,
    )
    header, _ = decode_batch(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 2, 40)
    assert header.is_transactional


def test_log_append_time_gives_every_record_the_max_timestamp():
    records = [Record(100, value=b"a"), Record(300, value=b"b"), Record(200, value=b"c")]
    batch = build_batch(records, timestamp_type=TimestampType.LOG_APPEND_TIME)
    header, decoded = decode_batch(batch)
    assert [r.timestamp_ms for r in decoded] == [300, 300, 300]
    assert header.base_timestamp == 100


def test_timestamps_before_the_first_record_are_negative_deltas():
    records = [Record(1_000, value=b"a"), Record(10, value=b"b")]
    _, decoded = decode_batch(build_batch(records))
    assert [r.timestamp_ms for r in decoded] == [1_000, 10]


def test_build_needs_a_record():
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])


@pytest.mark.timeout(2)
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
def test_huge_record_count_fails_fast(codec):
    body = plain_record() * 3
    if codec:
        body = compress(codec, body)
    with pytest.raises(InvalidRecord, match="cannot fit"):
        decode_batch(forge(body, 2**31 - 1, compression=codec))


@pytest.mark.timeout(2)
@pytest.mark.parametrize(
    ("body", "match"),
    [
        (encode_varint(2**31 - 1) + bytes(20), "does not fit"),  # record length
        (plain_record(key=encode_varint(2**31 - 1)) + bytes(10), "does not fit"),  # key length
        (plain_record(key=encode_varint(-2)), "does not fit"),  # negative, not -1
        (plain_record(headers=encode_varint(2**31 - 1)) + bytes(10), "headers cannot fit"),
        (plain_record(headers=encode_varint(-1)), "headers cannot fit"),
    ],
)
def test_huge_or_negative_lengths_are_invalid_record(body, match):
    with pytest.raises(InvalidRecord, match=match):
        decode_batch(forge(body, 1))


def test_fewer_records_than_declared_is_invalid_record():
    with pytest.raises(InvalidRecord):
        decode_batch(forge(plain_record() * 2, 3))


def test_bytes_after_the_last_record_are_invalid_record():
    with pytest.raises(InvalidRecord, match="follow the last record"):
        decode_batch(forge(plain_record() * 2 + b"\x00" * 7, 2))


def test_record_longer_than_its_fields_is_invalid_record():
    null, zero = encode_varint(-1), encode_varint(0)
    padded = record_bytes(b"\x00", encode_varlong(0), zero, null, null, zero, b"xx")
    with pytest.raises(InvalidRecord, match="record declares"):
        decode_batch(forge(padded, 1))


def test_overlong_varint_in_a_record_is_invalid_record():
    body = record_bytes(b"\x00", b"\x80" * 11, bytes(10))
    with pytest.raises(InvalidRecord, match="malformed record"):
        decode_batch(forge(body, 1))


@pytest.mark.parametrize(
    ("header", "match"),
    [
        (encode_varint(-1) + encode_varint(-1), "key is null"),
        (encode_varint(2) + b"\xff\xfe" + encode_varint(-1), "not UTF-8"),
    ],
)
def test_bad_header_keys_are_invalid_record(header, match):
    with pytest.raises(InvalidRecord, match=match):
        decode_batch(forge(plain_record(headers=encode_varint(1) + header), 1))


@pytest.mark.parametrize("codec", list(Compression)[1:])
def test_undecodable_compressed_records_are_corrupt(codec):
    with pytest.raises(CorruptBatch, match="does not decompress"):
        decode_batch(forge(b"\x01\x02\x03 not compressed", 1, compression=codec))


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
def test_decompression_bomb_in_a_batch_is_refused(codec):
    batch = forge(compress(codec, bytes(50 * MiB)), 1, compression=codec)
    with pytest.raises(InvalidRecord, match="too large") as caught:
        decode_batch(batch, max_decompressed_bytes=MiB)
    assert isinstance(caught.value.__cause__, DecompressionTooLarge)


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_decode_garbage_only_raises_invalid_batch(data):
    try:
        decode_batch(data)
    except InvalidBatch:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(1, 2**31 - 1), codecs, st.sampled_from([0, 8]))
def test_decode_garbage_records_behind_a_valid_header_only_raises_invalid_batch(
    body, count, codec, timestamp_type
):
    try:
        _, decoded = decode_batch(forge(body, count, compression=codec, attributes=timestamp_type))
    except InvalidBatch:
        return
    assert len(decoded) == count


@settings(max_examples=200, deadline=None)
@given(st.lists(records_strategy, min_size=1, max_size=4), codecs, st.data())
def test_decode_damaged_records_behind_a_valid_crc_only_raises_invalid_batch(records, codec, data):
    batch = build_batch(records, compression=codec)
    body = bytearray(batch[HEADER_SIZE:])
    index = data.draw(st.integers(0, len(body) - 1))
    body[index] ^= data.draw(st.integers(1, 255))
    try:
        decode_batch(forge(bytes(body), len(records), compression=codec))
    except InvalidBatch:
        pass

"""Golden check against a real client's record code: kafka-python's DefaultRecordBatch."""

import pytest

kafka_codec = pytest.importorskip("kafka.codec")
default_records = pytest.importorskip("kafka.record.default_records")

from core.records.batch import split_batches, with_partition_leader_epoch  # noqa: E402
from core.records.builder import Record, build_batch  # noqa: E402
from core.records.compression import Compression  # noqa: E402
from core.records.decoder import decode_batch  # noqa: E402

RECORDS = [
    Record(1_700_000_000_000, None, b"first", ()),
    Record(1_700_000_000_250, b"key", None, (("trace", b"abc"), ("empty", None))),
    Record(1_699_999_999_900, b"k" * 300, b"v" * 5_000, (("\u00e9t\u00e9", b"\x00\xff"),)),
]


def _codec_params():
    # kafka-python needs python-snappy for snappy, which the test extras do not pull in.
    skip_snappy = pytest.mark.skipif(not kafka_codec.has_snappy(), reason="no python-snappy")
    return [
        pytest.param(codec, marks=[skip_snappy] if codec is Compression.SNAPPY else [])
        for codec in Compression
    ]


def kafka_python_batch(codec: Compression) -> bytes:
    builder = default_records.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for offset, record in enumerate(RECORDS):
        builder.append(offset, record.timestamp_ms, record.key, record.value, list(record.headers))
    return bytes(builder.build())


@pytest.mark.parametrize("codec", _codec_params())
def test_we_decode_kafka_python_batches(codec):
    batch = kafka_python_batch(codec)
    (view,) = split_batches(batch)
    header, decoded = decode_batch(view)
    assert header.compression is codec
    assert header.max_timestamp == 1_700_000_000_250
    assert [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in decoded] == [
        (i, r.timestamp_ms, r.key, r.value, r.headers) for i, r in enumerate(RECORDS)
    ]


@pytest.mark.parametrize("codec", _codec_params())
def test_kafka_python_decodes_our_batches(codec):
    ours = build_batch(RECORDS, base_offset=100, compression=codec)
    batch = default_records.DefaultRecordBatch(bytearray(ours))
    assert batch.validate_crc()
    assert batch.compression_type == codec
    assert (batch.base_offset, batch.last_offset_delta) == (100, 2)
    assert batch.max_timestamp == 1_700_000_000_250
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch] == [
        (100 + i, r.timestamp_ms, r.key, r.value, list(r.headers)) for i, r in enumerate(RECORDS)
    ]


def test_uncompressed_bytes_match_kafka_python_exactly():
    # kafka-python writes partitionLeaderEpoch 0 where the Java client writes -1 (our default).
    ours = build_batch(RECORDS, partition_leader_epoch=0)
    assert ours == kafka_python_batch(Compression.NONE)
    assert with_partition_leader_epoch(ours, -1) == build_batch(RECORDS)

import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.records.compression import (
    Compression,
    CompressionError,
    CorruptCompressedData,
    DecompressionTooLarge,
    compress,
    decompress,
)

CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def bombs():
    zeros = bytes(50 * MiB)
    return {codec: compress(codec, zeros) for codec in CODECS}


@pytest.mark.parametrize("codec", CODECS)
def test_decompression_bomb_is_refused(codec, bombs):
    with pytest.raises(DecompressionTooLarge, match="1048576"):
        decompress(codec, bombs[codec], max_bytes=MiB)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", b"x", bytes(range(256)) * 700])
def test_round_trip_at_exactly_the_budget(codec, data):
    compressed = compress(codec, data)
    assert decompress(codec, memoryview(compressed), max_bytes=len(data)) == data
    if data:
        with pytest.raises(DecompressionTooLarge):
            decompress(codec, compressed, max_bytes=len(data) - 1)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_concatenated_frames_are_read_and_counted_together(codec):
    compressed = compress(codec, b"abc" * 100)
    assert decompress(codec, compressed + compressed, max_bytes=600) == b"abc" * 200
    with pytest.raises(DecompressionTooLarge):
        decompress(codec, compressed + compressed, max_bytes=599)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_every_truncation_is_corrupt(codec):
    compressed = compress(codec, bytes(range(256)) * 4)
    for cut in range(len(compressed)):
        with pytest.raises(CorruptCompressedData):
            decompress(codec, compressed[:cut], max_bytes=MiB)


def test_snappy_writes_xerial_framing_in_32k_blocks():
    data = bytes(range(256)) * 300  # 76,800 bytes: three blocks
    compressed = compress(Compression.SNAPPY, data)
    magic, version, compatible = struct.unpack_from(">8sii", compressed)
    assert (magic, version, compatible) == (b"\x82SNAPPY\x00", 1, 1)
    pos, blocks = 16, []
    while pos < len(compressed):
        (length,) = struct.unpack_from(">i", compressed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(compressed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert [len(block) for block in blocks] == [32768, 32768, 11264]
    assert b"".join(blocks) == data


def test_snappy_accepts_raw_blocks_as_librdkafka_writes_them():
    raw = bytes(cramjam.snappy.compress_raw(b"hello " * 1000))
    assert decompress(Compression.SNAPPY, raw, max_bytes=6000) == b"hello " * 1000
    with pytest.raises(DecompressionTooLarge):
        decompress(Compression.SNAPPY, raw, max_bytes=5999)


@pytest.mark.parametrize(
    "data",
    [
        b"\x82SNAPPY\x00\x00\x00",  # header cut short
        b"\x82SNAPPY\x00" + bytes(8) + b"\x00\x00",  # block length cut short
        b"\x82SNAPPY\x00" + bytes(8) + b"\x00\x00\x00\x09abc",  # block longer than the data
        b"\x82SNAPPY\x00" + bytes(8) + b"\xff\xff\xff\xff",  # negative block length
        b"\x05ab",  # raw block shorter than it declares
    ],
)
def test_malformed_snappy_is_corrupt(data):
    with pytest.raises(CorruptCompressedData):
        decompress(Compression.SNAPPY, data, max_bytes=MiB)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=200))
def test_garbage_only_raises_compression_errors(codec, data):
    try:
        out = decompress(codec, data, max_bytes=4096)
    except CompressionError:
        return
    assert len(out) <= 4096


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(CODECS), st.binary(min_size=1, max_size=300), st.data())
def test_damaged_streams_only_raise_compression_errors(codec, payload, data):
    compressed = bytearray(compress(codec, payload))
    index = data.draw(st.integers(0, len(compressed) - 1))
    compressed[index] ^= data.draw(st.integers(1, 255))
    try:
        decompress(codec, bytes(compressed), max_bytes=4096)
    except CompressionError:
        pass

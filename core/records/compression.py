"""The RecordBatch compression codecs (attributes bits 0-2), with bounded decompression.

Wire formats, as Kafka clients write them:

    1 gzip    one or more RFC 1952 gzip members
    2 snappy  either one raw snappy block (librdkafka, kafka-python) or the xerial
              framing the Java client writes:
                  magic      8 bytes  82 'S' 'N' 'A' 'P' 'P' 'Y' 00
                  version    int32    (1)
                  compatible int32    (1)
                  then blocks of [int32 big-endian length][raw snappy block]
              A raw snappy block starts with a varint of its uncompressed length.
              The xerial framing has no end marker, so a stream cut at a block
              boundary cannot be told from a shorter one (the batch CRC catches it).
    3 lz4     the LZ4 frame format, independent 64 KiB blocks, no content size
              (what Kafka's own KafkaLZ4BlockOutputStream writes)
    4 zstd    one or more zstd frames

Decompression takes a ``max_bytes`` budget and raises DecompressionTooLarge as soon
as the output would exceed it, without allocating the rest; any malformed input
raises CorruptCompressedData. Nothing else escapes.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CompressionError(ValueError):
    """Compressed records could not be turned back into bytes."""


class CorruptCompressedData(CompressionError):
    """The input is not valid data for its codec (garbage, truncated, trailing junk)."""


class DecompressionTooLarge(CompressionError):
    """The input would decompress to more than the caller's budget."""


def compress(codec: Compression | int, data: bytes | memoryview) -> bytes:
    codec = Compression(codec)
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        return gzip.compress(data)
    if codec is Compression.SNAPPY:
        return _xerial_snappy_compress(data)
    if codec is Compression.LZ4:
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    return zstandard.ZstdCompressor().compress(data)


def decompress(codec: Compression | int, data: bytes | memoryview, *, max_bytes: int) -> bytes:
    codec = Compression(codec)
    if codec is Compression.NONE:
        if len(data) > max_bytes:
            raise DecompressionTooLarge(f"{len(data)} bytes exceed the {max_bytes} byte budget")
        return bytes(data)
    if codec is Compression.GZIP:
        return _gunzip(data, max_bytes)
    if codec is Compression.SNAPPY:
        return _snappy_decompress(data, max_bytes)
    if codec is Compression.LZ4:
        return _lz4_decompress(data, max_bytes)
    return _zstd_decompress(data, max_bytes)


def _too_large(max_bytes: int) -> DecompressionTooLarge:
    return DecompressionTooLarge(f"decompressed data exceeds the {max_bytes} byte budget")


# --- gzip -----------------------------------------------------------------------

_GZIP_ONLY = 16 + zlib.MAX_WBITS


def _gunzip(data: bytes | memoryview, max_bytes: int) -> bytes:
    out = bytearray()
    rest = data
    while True:
        member = zlib.decompressobj(_GZIP_ONLY)
        try:
            # Asking for one byte past the budget tells "fits exactly" from "too large".
            # (max_length is always >= 1 here; 0 would mean unlimited.)
            out += member.decompress(rest, max_bytes + 1 - len(out))
        except zlib.error as exc:
            raise CorruptCompressedData(f"gzip: {exc}") from exc
        if len(out) > max_bytes:
            raise _too_large(max_bytes)
        if not member.eof:
            raise CorruptCompressedData("gzip: truncated member")
        rest = member.unused_data
        if not rest:
            return bytes(out)


# --- snappy ---------------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_VERSION = 1
_XERIAL_COMPATIBLE = 1
_XERIAL_BLOCK_BYTES = 32 * 1024  # the Java client's block size
_BLOCK_LENGTH = struct.Struct(">i")


def _xerial_snappy_compress(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_COMPATIBLE)]
    for start in range(0, len(view), _XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_BYTES]))
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes | memoryview, max_bytes: int) -> bytes:
    view = memoryview(data)
    if bytes(view[: len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
        return _snappy_block(view, max_bytes, max_bytes)
    if len(view) < _XERIAL_HEADER.size:
        raise CorruptCompressedData("snappy: truncated xerial header")
    out = bytearray()
    pos = _XERIAL_HEADER.size
    while pos < len(view):
        if pos + _BLOCK_LENGTH.size > len(view):
            raise CorruptCompressedData("snappy: truncated xerial block length")
        (length,) = _BLOCK_LENGTH.unpack_from(view, pos)
        pos += _BLOCK_LENGTH.size
        if length < 0 or pos + length > len(view):
            raise CorruptCompressedData(f"snappy: xerial block of {length} bytes does not fit")
        out += _snappy_block(view[pos : pos + length], max_bytes - len(out), max_bytes)
        pos += length
    return bytes(out)


def _snappy_block(block: memoryview, budget: int, max_bytes: int) -> bytes:
    # A raw block declares its output length up front, so check it before decoding.
    try:
        declared = cramjam.snappy.decompress_raw_len(block)
    except cramjam.DecompressionError as exc:
        raise CorruptCompressedData(f"snappy: {exc}") from exc
    if declared > budget:
        raise _too_large(max_bytes)
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as exc:
        raise CorruptCompressedData(f"snappy: {exc}") from exc


# --- lz4 ------------------------------------------------------------------------


def _lz4_decompress(data: bytes | memoryview, max_bytes: int) -> bytes:
    out = bytearray()
    rest = data
    while True:
        frame = lz4.frame.LZ4FrameDecompressor()
        try:
            out += frame.decompress(rest, max_length=max_bytes + 1 - len(out))
        except RuntimeError as exc:  # the lz4 binding reports bad frames as RuntimeError
            raise CorruptCompressedData(f"lz4: {exc}") from exc
        if len(out) > max_bytes:
            raise _too_large(max_bytes)
        if not frame.eof:
            raise CorruptCompressedData("lz4: truncated frame")
        rest = frame.unused_data
        if not rest:
            return bytes(out)


# --- zstd -----------------------------------------------------------------------

# zstandard's decompressobj reports truncation (eof) but has no output limit, and its
# stream_reader has a limit but hides truncation. So feed decompressobj only as much
# input as could not, even at zstd's best ratio (a 4-byte RLE block expands to one
# 128 KiB block), overshoot the remaining budget by more than one block.
_ZSTD_MAX_RATIO = 128 * 1024 // 4


def _zstd_decompress(data: bytes | memoryview, max_bytes: int) -> bytes:
    rest = memoryview(data)
    if not rest:
        raise CorruptCompressedData("zstd: empty input")
    out = bytearray()
    while rest:
        frame = zstandard.ZstdDecompressor().decompressobj()
        while not frame.eof:
            if not rest:
                raise CorruptCompressedData("zstd: truncated frame")
            step = max(1, (max_bytes - len(out)) // _ZSTD_MAX_RATIO)
            try:
                out += frame.decompress(rest[:step])
            except zstandard.ZstdError as exc:
                raise CorruptCompressedData(f"zstd: {exc}") from exc
            rest = rest[step:]
            if len(out) > max_bytes:
                raise _too_large(max_bytes)
        # Input fed past the frame's end comes back as unused_data; put it back in front.
        if frame.unused_data:
            rest = memoryview(bytes(frame.unused_data) + rest)
    return bytes(out)

"""Pulsar's payload compression (MessageMetadata.compression), bounded by the declared size.

    NONE 0, LZ4 1 (one raw LZ4 block, no frame), ZLIB 2 (zlib stream), ZSTD 3 (zstd frame),
    SNAPPY 4 (one raw snappy block, no framing)

Unlike Kafka's batches, a Pulsar payload declares its uncompressed size (uncompressed_size), so the
budget is checked before anything is decompressed and the result must be exactly that long.
"""

from __future__ import annotations

import zlib

import cramjam
import lz4.block
import zstandard

from protocols.pulsar.codec.errors import DecodeError
from protocols.pulsar.codec.pulsar_wire_pb2 import LZ4, NONE, SNAPPY, ZLIB, ZSTD

CODECS = (NONE, LZ4, ZLIB, ZSTD, SNAPPY)


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    if codec == LZ4:
        return lz4.block.compress(data, store_size=False)
    if codec == ZLIB:
        return zlib.compress(data)
    if codec == ZSTD:
        return zstandard.ZstdCompressor().compress(data)
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    raise ValueError(f"unknown compression {codec}")


def decompress(codec: int, data: bytes, uncompressed_size: int, max_bytes: int) -> bytes:
    """`data` decompressed; DecodeError when it is not `uncompressed_size` bytes of valid data or
    that size is over `max_bytes`."""
    if codec == NONE:
        return data
    if uncompressed_size > max_bytes:
        raise DecodeError(f"payload declares {uncompressed_size} uncompressed bytes, over the {max_bytes} limit")
    try:
        if codec == LZ4:
            out = lz4.block.decompress(data, uncompressed_size=uncompressed_size)
        elif codec == ZLIB:
            inflater = zlib.decompressobj()
            out = inflater.decompress(data, uncompressed_size + 1)
        elif codec == ZSTD:
            out = zstandard.ZstdDecompressor().decompress(data, max_output_size=uncompressed_size)
        elif codec == SNAPPY:
            if cramjam.snappy.decompress_raw_len(data) != uncompressed_size:
                raise DecodeError("snappy block's length differs from the declared uncompressed size")
            out = bytes(cramjam.snappy.decompress_raw(data))
        else:
            raise DecodeError(f"unknown compression {codec}")
    except (lz4.block.LZ4BlockError, zlib.error, zstandard.ZstdError, cramjam.DecompressionError) as exc:
        raise DecodeError(f"payload does not decompress: {exc}") from None
    if len(out) != uncompressed_size:
        raise DecodeError(f"payload decompressed to {len(out)} bytes, declared {uncompressed_size}")
    return out

"""Decoding only some records of a batch, or only their offsets and times: the same records as a
full decode, for plain and compressed batches, and the same refusal of a damaged batch."""

from __future__ import annotations

import pytest

from core.records.batch import CorruptBatch
from core.records.builder import Record, build_batch
from core.records.compression import Compression
from core.records.decoder import decode_batch, decode_records_at, decode_timestamps


def sample(compression: Compression) -> bytes:
    records = [Record(1_000 + 7 * n, key=f"k{n}".encode(), value=b"v" * n, headers=(("h", str(n).encode()),))
               for n in range(50)]
    return build_batch(records, base_offset=300, compression=compression)


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
def test_partial_decodes_agree_with_a_full_decode(compression) -> None:
    batch = sample(compression)
    _, everything = decode_batch(batch)
    wanted = {300, 317, 349, 999}
    assert decode_records_at(batch, wanted) == [r for r in everything if r.offset in wanted]
    assert decode_timestamps(batch) == [(r.offset, r.timestamp_ms) for r in everything]


def test_partial_decodes_refuse_a_damaged_batch() -> None:
    batch = bytearray(sample(Compression.NONE))
    batch[-3] ^= 0xFF
    with pytest.raises(CorruptBatch):
        decode_records_at(batch, {300})
    with pytest.raises(CorruptBatch):
        decode_timestamps(batch)

"""Decoding only some records of a batch, or only their offsets and times: the same records as a
full decode, for plain and compressed batches, and the same refusal of a damaged batch; a record's
tail batched again without decoding is the same record."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, CorruptBatch, InvalidBatch, InvalidRecord
from core.records.builder import EncodedRecord, Record, build_batch
from core.records.compression import Compression
from core.records.decoder import decode_batch, decode_tail, decode_timestamps, record_tails_at, split_tail
from tests.core.records.test_records_decoder import forge, records_strategy


def sample(compression: Compression) -> bytes:
    records = [Record(1_000 + 7 * n, key=f"k{n}".encode(), value=b"v" * n, headers=(("h", str(n).encode()),))
               for n in range(50)]
    return build_batch(records, base_offset=300, compression=compression)


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
def test_partial_decodes_agree_with_a_full_decode(compression) -> None:
    batch = sample(compression)
    _, everything = decode_batch(batch)
    wanted = [200, 300, 317, 317, 349, 999]
    tails = record_tails_at(batch, wanted)
    assert [(t.offset, t.timestamp_ms, *decode_tail(t.tail)) for t in tails] == \
        [tuple(r) for r in everything if r.offset in wanted]
    assert decode_timestamps(batch) == [(r.offset, r.timestamp_ms) for r in everything]


def test_partial_decodes_refuse_a_damaged_batch() -> None:
    batch = bytearray(sample(Compression.NONE))
    batch[-3] ^= 0xFF
    with pytest.raises(CorruptBatch):
        record_tails_at(batch, [300])
    with pytest.raises(CorruptBatch):
        decode_timestamps(batch)


def test_a_tail_batched_again_is_the_same_record_and_its_headers_split_as_encoded() -> None:
    _, everything = decode_batch(sample(Compression.NONE))
    [tail] = record_tails_at(sample(Compression.NONE), [317])
    again = EncodedRecord(5_000, tail.tail)
    assert (again.key, again.value, again.headers) == everything[17][2:]
    _, [copy] = decode_batch(build_batch([again]))
    assert copy[1:] == (5_000, *everything[17][2:])
    head, count, headers, rest = split_tail(tail.tail)
    assert head == tail.tail[:len(head)] and decode_tail(head + b"\x00") == (b"k17", b"v" * 17, ())
    assert (count, headers, rest) == (1, [(b"h", b"17", b"\x02h\x0417")], b"")
    two = head + b"\x04" + headers[0][2] + b"\x02g\x01"        # two headers: h=17, then g=null
    assert split_tail(two, 1) == (head, 2, [(b"h", b"17", b"\x02h\x0417")], b"\x02g\x01")
    assert split_tail(two, 0)[2:] == ([], headers[0][2] + b"\x02g\x01")


def test_a_record_whose_offset_delta_is_not_its_position_is_refused() -> None:
    batch = bytearray(build_batch([Record(1, b"a"), Record(1, b"b")], base_offset=10))
    second = batch.index(b"\x00\x00\x02\x02b")          # attributes, timestamp delta, offset delta 1, key
    batch[second + 2] = 0x0A                                 # offset delta 5
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c.crc32c(bytes(batch[ATTRIBUTES_OFFSET:])))
    assert [t.offset for t in record_tails_at(batch, [10])] == [10]
    with pytest.raises(InvalidRecord):
        record_tails_at(batch, [11])


@settings(max_examples=200, deadline=None)
@given(st.lists(records_strategy, min_size=1, max_size=6), st.data())
def test_tails_batched_again_decode_to_the_records_built(records, data) -> None:
    batch = build_batch(records, base_offset=40)
    wanted = sorted(data.draw(st.lists(st.integers(35, 50), max_size=8)))
    tails = record_tails_at(batch, wanted)
    assert [t.offset for t in tails] == sorted({o for o in wanted if 40 <= o < 40 + len(records)})
    if tails:
        _, again = decode_batch(build_batch([EncodedRecord(t.timestamp_ms, t.tail) for t in tails]))
        assert [r[1:] for r in again] == \
            [(r.timestamp_ms, r.key, r.value, r.headers) for r in (records[t.offset - 40] for t in tails)]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(1, 40), st.lists(st.integers(0, 40), max_size=5))
def test_tails_of_garbage_records_only_raise_invalid_batch(body, count, wanted) -> None:
    try:
        tails = record_tails_at(forge(body, count), sorted(wanted))
    except InvalidBatch:
        return
    for tail in tails:
        try:
            split_tail(tail.tail)
        except InvalidBatch:
            pass

"""Corruption catalog for the journal's byte layout: `scan`, `decode_record`, `read_segment_header`.

Every case builds a real segment file with `segment_header` + `encode_record` and damages it the way
a crash or bad media would. The rule under test: a scan yields only whole, checksummed records and
stops at the first bad one, reporting where and how many bytes follow; it never skips ahead.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest

from storage.bookie import journal_format as fmt
from storage.bookie.journal_format import (BODY_FIXED, MAX_BODY_BYTES, RECORD_HEADER, SEGMENT_HEADER, BadSegment,
                                           Record, RecordKind, ScanStop, decode_record, encode_record,
                                           read_segment_header, scan, segment_header)

SEGMENT_ID = 7
HEADER_SIZE = SEGMENT_HEADER.size


def record_bytes(kind: RecordKind, ledger_id: int, entry_id: int, lac: int, payload: bytes) -> bytes:
    head, body = encode_record(kind, ledger_id, entry_id, lac, payload)
    return head + body


def entry(entry_id: int, payload: bytes, ledger_id: int = 3) -> bytes:
    return record_bytes(RecordKind.ENTRY, ledger_id, entry_id, entry_id - 1, payload)


def write_segment(path: Path, *parts: bytes, header: bytes | None = None) -> Path:
    path.write_bytes((segment_header(SEGMENT_ID) if header is None else header) + b"".join(parts))
    return path


def scan_file(path: Path, start: int = HEADER_SIZE) -> list[Record | ScanStop]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return list(scan(fd, start, os.fstat(fd).st_size))
    finally:
        os.close(fd)


def header_check(path: Path, segment_id: int = SEGMENT_ID) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        read_segment_header(fd, segment_id)
    finally:
        os.close(fd)


def split(items: list[Record | ScanStop]) -> tuple[list[Record], ScanStop | None]:
    records = [item for item in items if isinstance(item, Record)]
    stops = [item for item in items if isinstance(item, ScanStop)]
    assert len(stops) <= 1
    if stops:
        assert items[-1] is stops[0], "a ScanStop must be the last thing a scan yields"
    return records, (stops[0] if stops else None)


def with_length(record: bytes, body_len: int) -> bytes:
    """The same record with its length field replaced (the CRC is left as it was)."""
    _, crc = RECORD_HEADER.unpack_from(record, 0)
    return RECORD_HEADER.pack(body_len, crc) + record[RECORD_HEADER.size:]


def flip(data: bytes, index: int) -> bytes:
    mutable = bytearray(data)
    mutable[index] ^= 0x01
    return bytes(mutable)


# --- segment header -------------------------------------------------------------------------------


def test_empty_file_has_no_segment_header_and_scans_to_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.log"
    path.write_bytes(b"")
    with pytest.raises(BadSegment, match=r"header truncated \(0 bytes\)"):
        header_check(path)
    assert scan_file(path) == []


def test_partial_segment_header_is_a_bad_segment(tmp_path: Path) -> None:
    path = tmp_path / "s.log"
    path.write_bytes(segment_header(SEGMENT_ID)[:10])
    with pytest.raises(BadSegment, match=r"header truncated \(10 bytes\)"):
        header_check(path)


def test_header_only_segment_is_valid_and_holds_no_records(tmp_path: Path) -> None:
    path = write_segment(tmp_path / "s.log")
    header_check(path)  # raises on a bad header
    assert scan_file(path) == []


def test_segment_header_with_bad_magic_is_rejected(tmp_path: Path) -> None:
    path = write_segment(tmp_path / "s.log", header=SEGMENT_HEADER.pack(b"GWJX", fmt.FORMAT_VERSION, 0, SEGMENT_ID))
    with pytest.raises(BadSegment, match="bad magic b'GWJX'"):
        header_check(path)


def test_segment_header_with_unknown_format_version_is_rejected(tmp_path: Path) -> None:
    path = write_segment(tmp_path / "s.log", header=SEGMENT_HEADER.pack(fmt.MAGIC, fmt.FORMAT_VERSION + 1, 0,
                                                                        SEGMENT_ID))
    with pytest.raises(BadSegment, match=f"unknown format version {fmt.FORMAT_VERSION + 1}"):
        header_check(path)


def test_segment_header_naming_another_segment_is_rejected(tmp_path: Path) -> None:
    path = write_segment(tmp_path / "s.log", header=segment_header(SEGMENT_ID + 1))
    with pytest.raises(BadSegment, match=f"header names segment {SEGMENT_ID + 1:x}"):
        header_check(path, SEGMENT_ID)


def test_segment_name_is_sixteen_hex_digits() -> None:
    assert fmt.segment_name(0x1F) == "000000000000001f.log"


# --- records that scan cleanly --------------------------------------------------------------------


def test_scan_yields_each_record_with_its_offset_size_ids_lac_and_payload(tmp_path: Path) -> None:
    r0 = record_bytes(RecordKind.ENTRY, 11, 0, -1, b"first")
    r1 = record_bytes(RecordKind.ENTRY, 12, 5, 4, b"")
    r2 = record_bytes(RecordKind.FENCE, 11, -1, -1, b"")
    r3 = record_bytes(RecordKind.LEDGER_DELETED, 2**64 - 1, -1, -1, b"")
    r4 = record_bytes(RecordKind.ENTRY, 11, 2**63 - 1, 2**63 - 2, b"\x00" * 300)
    path = write_segment(tmp_path / "s.log", r0, r1, r2, r3, r4)

    offsets = [HEADER_SIZE]
    for raw in (r0, r1, r2, r3):
        offsets.append(offsets[-1] + len(raw))
    assert scan_file(path) == [
        Record(RecordKind.ENTRY, 11, 0, -1, offsets[0], len(r0), b"first"),
        Record(RecordKind.ENTRY, 12, 5, 4, offsets[1], len(r1), b""),
        Record(RecordKind.FENCE, 11, -1, -1, offsets[2], len(r2), b""),
        Record(RecordKind.LEDGER_DELETED, 2**64 - 1, -1, -1, offsets[3], len(r3), b""),
        Record(RecordKind.ENTRY, 11, 2**63 - 1, 2**63 - 2, offsets[4], len(r4), b"\x00" * 300),
    ]


def test_scan_from_a_later_record_offset_yields_only_the_records_from_there(tmp_path: Path) -> None:
    r0, r1, r2 = entry(0, b"a"), entry(1, b"bb"), entry(2, b"ccc")
    path = write_segment(tmp_path / "s.log", r0, r1, r2)
    records, stop = split(scan_file(path, start=HEADER_SIZE + len(r0)))
    assert stop is None
    assert [(r.entry_id, r.offset, r.payload) for r in records] == [
        (1, HEADER_SIZE + len(r0), b"bb"), (2, HEADER_SIZE + len(r0) + len(r1), b"ccc")]


def test_record_size_is_header_plus_fixed_fields_plus_payload() -> None:
    head, payload = encode_record(RecordKind.ENTRY, 1, 2, 3, b"xyz")
    assert payload == b"xyz"
    assert len(head) == fmt.RECORD_OVERHEAD == RECORD_HEADER.size + BODY_FIXED.size
    body_len, crc = RECORD_HEADER.unpack_from(head, 0)
    assert body_len == BODY_FIXED.size + 3
    assert crc == crc32c.crc32c(head[RECORD_HEADER.size:] + payload)


def test_scan_of_many_records_across_the_read_chunk_boundaries_yields_them_all(tmp_path: Path) -> None:
    rng = random.Random(7)
    payloads = [rng.randbytes(3 * 1024) for _ in range(3_000)]  # ~9.1 MiB: crosses two 4 MiB chunks
    path = write_segment(tmp_path / "s.log", *(entry(i, p) for i, p in enumerate(payloads)))
    records, stop = split(scan_file(path))
    assert stop is None
    assert len(records) == 3_000
    assert [r.entry_id for r in records] == list(range(3_000))
    assert all(r.payload == p for r, p in zip(records, payloads))
    size = len(entry(0, payloads[0]))
    assert [r.offset for r in records] == [HEADER_SIZE + i * size for i in range(3_000)]


def test_scan_yields_a_record_larger_than_the_read_chunk(tmp_path: Path) -> None:
    big = random.Random(1).randbytes(5 << 20)
    r0, r1, r2 = entry(0, b"small"), entry(1, big), entry(2, b"after")
    path = write_segment(tmp_path / "s.log", r0, r1, r2)
    records, stop = split(scan_file(path))
    assert stop is None
    assert [r.payload for r in records] == [b"small", big, b"after"]
    assert records[2].offset == HEADER_SIZE + len(r0) + len(r1)


def test_scan_stops_at_a_record_truncated_after_a_chunk_boundary(tmp_path: Path) -> None:
    payloads = [bytes([i % 256]) * 3 * 1024 for i in range(1_500)]  # ~4.5 MiB
    records_raw = [entry(i, p) for i, p in enumerate(payloads)]
    cut = records_raw[-1][:100]
    path = write_segment(tmp_path / "s.log", *records_raw[:-1], cut)
    records, stop = split(scan_file(path))
    assert len(records) == 1_499
    assert stop == ScanStop(HEADER_SIZE + sum(map(len, records_raw[:-1])), 100, "truncated record body")


# --- where a scan must stop -----------------------------------------------------------------------


@pytest.mark.parametrize("kept", [1, 4, 7])
def test_scan_stops_at_truncated_record_header_and_reports_dropped_bytes(tmp_path: Path, kept: int) -> None:
    r0, r1 = entry(0, b"good"), entry(1, b"cut in its header")
    path = write_segment(tmp_path / "s.log", r0, r1[:kept])
    records, stop = split(scan_file(path))
    assert [r.payload for r in records] == [b"good"]
    assert stop == ScanStop(HEADER_SIZE + len(r0), kept, "truncated record header")


@pytest.mark.parametrize("kept_of_body", [0, 1, BODY_FIXED.size, BODY_FIXED.size + 10])
def test_scan_stops_at_truncated_body_and_reports_dropped_bytes(tmp_path: Path, kept_of_body: int) -> None:
    r0, r1 = entry(0, b"good"), entry(1, b"p" * 40)
    torn = r1[:RECORD_HEADER.size + kept_of_body]
    path = write_segment(tmp_path / "s.log", r0, torn)
    records, stop = split(scan_file(path))
    assert [r.payload for r in records] == [b"good"]
    assert stop == ScanStop(HEADER_SIZE + len(r0), len(torn), "truncated record body")


@pytest.mark.parametrize("where", ["payload", "fixed fields", "crc field"])
def test_scan_stops_at_a_record_with_one_flipped_byte(tmp_path: Path, where: str) -> None:
    r0, r1, r2 = entry(0, b"good"), entry(1, b"payload to damage"), entry(2, b"never reached")
    index = {"payload": len(r1) - 3, "fixed fields": RECORD_HEADER.size + 2, "crc field": 5}[where]
    path = write_segment(tmp_path / "s.log", r0, flip(r1, index), r2)
    records, stop = split(scan_file(path))
    assert [r.payload for r in records] == [b"good"]
    assert stop == ScanStop(HEADER_SIZE + len(r0), len(r1) + len(r2), "record checksum mismatch")


@pytest.mark.parametrize("body_len", [0, 1, BODY_FIXED.size - 1, MAX_BODY_BYTES + 1, 2**32 - 1])
def test_scan_stops_at_an_impossible_record_length(tmp_path: Path, body_len: int) -> None:
    r0, r1 = entry(0, b"good"), entry(1, b"bad length")
    path = write_segment(tmp_path / "s.log", r0, with_length(r1, body_len))
    records, stop = split(scan_file(path))
    assert [r.payload for r in records] == [b"good"]
    assert stop == ScanStop(HEADER_SIZE + len(r0), len(r1), f"impossible record length {body_len}")


def test_zeros_from_a_record_boundary_to_the_end_are_preallocated_space_not_damage(tmp_path: Path) -> None:
    good = [entry(i, b"good %d" % i) for i in range(2)]
    path = write_segment(tmp_path / "s.log", *good, bytes(5 << 20))   # past one read chunk
    records, stop = split(scan_file(path))
    assert [r.entry_id for r in records] == [0, 1]
    assert stop == ScanStop(HEADER_SIZE + sum(map(len, good)), 5 << 20, "preallocated space", preallocated=True)


@pytest.mark.parametrize("where", [0, (4 << 20) + 17, (5 << 20) - 1])
def test_zeros_with_any_written_byte_after_them_are_damage(tmp_path: Path, where: int) -> None:
    """A torn write may leave a record's first page unwritten and a later one written: not space."""
    tail = bytearray(5 << 20)
    tail[max(where, RECORD_HEADER.size)] = 1
    path = write_segment(tmp_path / "s.log", entry(0, b"good"), bytes(tail))
    records, stop = split(scan_file(path))
    assert [r.entry_id for r in records] == [0]
    assert stop == ScanStop(HEADER_SIZE + len(entry(0, b"good")), len(tail), "impossible record length 0")


def test_scan_accepts_a_record_of_the_minimum_body_length(tmp_path: Path) -> None:
    path = write_segment(tmp_path / "s.log", record_bytes(RecordKind.FENCE, 1, -1, -1, b""))
    records, stop = split(scan_file(path))
    assert stop is None
    assert records[0].size == RECORD_HEADER.size + BODY_FIXED.size


@pytest.mark.parametrize("kind", [0, 4, 9, 255])
def test_scan_stops_at_an_unknown_record_kind_even_with_a_correct_crc(tmp_path: Path, kind: int) -> None:
    body = BODY_FIXED.pack(kind, 3, 1, 0) + b"forged"
    forged = RECORD_HEADER.pack(len(body), crc32c.crc32c(body)) + body
    r0, r2 = entry(0, b"good"), entry(2, b"after the forged one")
    path = write_segment(tmp_path / "s.log", r0, forged, r2)
    records, stop = split(scan_file(path))
    assert [r.payload for r in records] == [b"good"]
    assert stop == ScanStop(HEADER_SIZE + len(r0), len(forged) + len(r2), f"unknown record kind {kind}")


@pytest.mark.parametrize("junk", [
    bytes(100),                                             # a preallocated, zero-filled tail
    random.Random(3).randbytes(100),                        # random garbage
    RECORD_HEADER.pack(40, 0) + b"\xab" * 40,              # a plausible length, nonsense body
    RECORD_HEADER.pack(40, 0) + b"\xab" * 12,              # a plausible length running past the end
], ids=["zeros", "random", "plausible-length", "plausible-length-short"])
def test_scan_yields_all_good_records_then_stops_at_a_junk_tail(tmp_path: Path, junk: bytes) -> None:
    good = [entry(i, b"good %d" % i) for i in range(3)]
    path = write_segment(tmp_path / "s.log", *good, junk)
    records, stop = split(scan_file(path))
    assert [r.entry_id for r in records] == [0, 1, 2]
    assert stop is not None
    assert (stop.offset, stop.dropped_bytes) == (HEADER_SIZE + sum(map(len, good)), len(junk))


def _glue_lengths(r0: bytes, r1: bytes) -> list[int]:
    body0 = len(r0) - RECORD_HEADER.size
    return [body0 + 1, body0 + RECORD_HEADER.size, body0 + len(r1) - 1, body0 + len(r1)]


@pytest.mark.parametrize("variant", range(4))
def test_a_hole_must_not_glue_a_corrupt_length_spanning_into_the_next_record_yields_neither(
        tmp_path: Path, variant: int) -> None:
    r0, r1 = entry(0, b"first record"), entry(1, b"second record")
    bad_len = _glue_lengths(r0, r1)[variant]
    path = write_segment(tmp_path / "s.log", with_length(r0, bad_len), r1)
    items = scan_file(path)
    records, stop = split(items)
    assert records == []  # neither the first (glued with the second's bytes) nor a resync to the second
    assert stop is not None
    assert stop.offset == HEADER_SIZE
    assert stop.dropped_bytes == len(r0) + len(r1)
    assert stop.reason in ("record checksum mismatch", "truncated record body")


def test_a_hole_must_not_glue_a_length_spanning_beyond_both_records_is_truncation_not_a_resync(
        tmp_path: Path) -> None:
    r0, r1 = entry(0, b"first record"), entry(1, b"second record")
    path = write_segment(tmp_path / "s.log", with_length(r0, len(r0) + len(r1)), r1)
    assert scan_file(path) == [ScanStop(HEADER_SIZE, len(r0) + len(r1), "truncated record body")]


def test_a_hole_must_not_glue_a_shortened_length_stops_without_resyncing(tmp_path: Path) -> None:
    r0, r1, r2 = entry(0, b"kept"), entry(1, b"a fairly long payload here"), entry(2, b"third")
    path = write_segment(tmp_path / "s.log", r0, with_length(r1, len(r1) - RECORD_HEADER.size - 6), r2)
    records, stop = split(scan_file(path))
    assert [r.entry_id for r in records] == [0]
    assert stop == ScanStop(HEADER_SIZE + len(r0), len(r1) + len(r2), "record checksum mismatch")


def test_a_hole_after_good_records_stops_before_the_record_it_would_glue_to(tmp_path: Path) -> None:
    r0, r1, r2 = entry(0, b"kept"), entry(1, b"damaged length"), entry(2, b"must not be yielded")
    path = write_segment(tmp_path / "s.log", r0, with_length(r1, len(r1) - RECORD_HEADER.size + 10), r2)
    records, stop = split(scan_file(path))
    assert [r.entry_id for r in records] == [0]
    assert stop == ScanStop(HEADER_SIZE + len(r0), len(r1) + len(r2), "record checksum mismatch")


# --- decode_record (reads by position) ------------------------------------------------------------


def test_decode_record_returns_the_record_at_the_given_offset() -> None:
    raw = record_bytes(RecordKind.ENTRY, 9, 4, 3, b"hello")
    assert decode_record(raw, 1234) == Record(RecordKind.ENTRY, 9, 4, 3, 1234, len(raw), b"hello")
    assert decode_record(memoryview(raw), 0).payload == b"hello"


@pytest.mark.parametrize("cut", [0, 7, fmt.RECORD_OVERHEAD - 1])
def test_decode_record_rejects_a_short_record(cut: int) -> None:
    raw = record_bytes(RecordKind.ENTRY, 9, 4, 3, b"hello")
    with pytest.raises(ValueError, match="short record"):
        decode_record(raw[:cut])


@pytest.mark.parametrize("delta", [-1, 1])
def test_decode_record_rejects_a_buffer_whose_length_disagrees_with_the_length_field(delta: int) -> None:
    raw = record_bytes(RecordKind.ENTRY, 9, 4, 3, b"hello")
    buf = raw[:delta] if delta < 0 else raw + b"\x00" * delta
    with pytest.raises(ValueError, match="record length does not match"):
        decode_record(buf)


def test_decode_record_rejects_a_flipped_payload_byte() -> None:
    raw = record_bytes(RecordKind.ENTRY, 9, 4, 3, b"hello")
    with pytest.raises(ValueError, match="record checksum mismatch"):
        decode_record(flip(raw, len(raw) - 1))


def test_decode_record_rejects_an_unknown_kind_with_a_correct_crc() -> None:
    body = BODY_FIXED.pack(9, 3, 1, 0) + b"forged"
    forged = RECORD_HEADER.pack(len(body), crc32c.crc32c(body)) + body
    with pytest.raises(ValueError, match="9 is not a valid RecordKind"):
        decode_record(forged)


def _records(items: list[Record | ScanStop]) -> Iterator[Record]:
    return (item for item in items if isinstance(item, Record))


def test_every_scanned_record_decodes_identically_when_read_by_position(tmp_path: Path) -> None:
    parts = [entry(i, bytes([i]) * (i * 37 % 500)) for i in range(50)]
    path = write_segment(tmp_path / "s.log", *parts)
    data = path.read_bytes()
    for record in _records(scan_file(path)):
        assert decode_record(data[record.offset:record.offset + record.size], record.offset) == record

"""A real Bookie on a temp directory with a real SQLite metadata store: adds, reads, fencing, start-up
recovery from torn and corrupt journals, index rebuilds, cookies, segment rolls, garbage collection
and the no-retry rule for a failed fsync."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import random
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from storage.api import BookieReadOnly, CookieMismatch, CorruptEntry, LedgerFenced, NoSuchEntry, NoSuchLedger
from storage.bookie import journal_format as fmt
from storage.bookie.bookie import Bookie
from storage.bookie.index import LedgerIndex
from storage.bookie.journal import list_segments
from storage.config import StorageConfig
from storage.metadata.sqlite import SqliteMetadataStore

SMALL_SEGMENTS = StorageConfig(journal_segment_bytes=1 << 20)


class Node:
    """A bookie directory plus its metadata store; each `bookie()` opens (and closes) one Bookie."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.dir = base / "bookie"
        self.journal_dir = self.dir / "journal"
        self.index_dir = self.dir / "index"
        self.metadata: SqliteMetadataStore | None = None

    @asynccontextmanager
    async def bookie(self, config: StorageConfig | None = None) -> AsyncIterator[Bookie]:
        bookie = await Bookie.open(self.dir, config or StorageConfig(), self.metadata)
        try:
            yield bookie
        finally:
            await bookie.close()

    def segments(self) -> list[int]:
        return list_segments(self.journal_dir)

    def segment_path(self, segment_id: int) -> Path:
        return self.journal_dir / fmt.segment_name(segment_id)

    def last_segment(self) -> Path:
        return self.segment_path(self.segments()[-1])

    def records(self, segment_id: int) -> list[fmt.Record]:
        fd = os.open(self.segment_path(segment_id), os.O_RDONLY)
        try:
            items = list(fmt.scan(fd, fmt.SEGMENT_HEADER.size, os.fstat(fd).st_size))
        finally:
            os.close(fd)
        if items and isinstance(items[-1], fmt.ScanStop) and items[-1].preallocated:
            items.pop()      # the segment being written: its unused space
        assert all(isinstance(item, fmt.Record) for item in items)
        return items


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(tmp_path)
    n.metadata = await SqliteMetadataStore.open(tmp_path / "metadata.db")
    try:
        yield n
    finally:
        await n.metadata.close()


def payload(ledger_id: int, entry_id: int, size: int = 40) -> bytes:
    stem = f"L{ledger_id}E{entry_id}:".encode()
    return (stem * (size // len(stem) + 1))[:size]


async def write_entries(bookie: Bookie, ledger_id: int, count: int, *, first: int = 0, size: int = 40) -> None:
    """Add entries one after another, each piggybacking the previous one as the LAC."""
    for entry_id in range(first, first + count):
        await bookie.add(ledger_id, entry_id, payload(ledger_id, entry_id, size), entry_id - 1)


async def assert_readable(bookie: Bookie, ledger_id: int, count: int, *, size: int = 40) -> None:
    for entry_id in range(count):
        assert await bookie.read(ledger_id, entry_id) == payload(ledger_id, entry_id, size)


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x40]))


# --- adds and reads -------------------------------------------------------------------------------


async def test_added_entry_is_readable_by_id_and_in_a_range(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 5)
        assert await bookie.read(1, 3) == payload(1, 3)
        assert await bookie.read_range(1, 0, 4, 1 << 30) == [payload(1, i) for i in range(5)]
        assert await bookie.read_range(1, 2, 100, 1 << 30) == [payload(1, i) for i in range(2, 5)]


async def test_read_range_stops_once_max_bytes_is_reached_but_returns_at_least_one(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 10, size=100)
        assert await bookie.read_range(1, 0, 9, 250) == [payload(1, i, 100) for i in range(3)]
        assert await bookie.read_range(1, 0, 9, 200) == [payload(1, i, 100) for i in range(2)]
        assert await bookie.read_range(1, 4, 9, 1) == [payload(1, 4, 100)]
        assert await bookie.read_range(1, 4, 9, 0) == [payload(1, 4, 100)]


async def test_reading_a_missing_entry_or_ledger_raises_no_such_entry(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 3)
        with pytest.raises(NoSuchEntry, match="ledger 1 entry 3"):
            await bookie.read(1, 3)
        with pytest.raises(NoSuchEntry, match="ledger 2 entry 0"):
            await bookie.read(2, 0)
        with pytest.raises(NoSuchEntry, match="ledger 1 entry 7"):
            await bookie.read_range(1, 7, 9, 1 << 20)


async def test_scattered_entries_come_back_in_the_order_asked_and_a_missing_one_fails_the_read(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 10)
        assert await bookie.read_entries(1, [7, 2, 9, 2]) == [payload(1, i) for i in (7, 2, 9, 2)]
        assert await bookie.read_entries(1, []) == []
        with pytest.raises(NoSuchEntry, match="ledger 1 entry 10"):
            await bookie.read_entries(1, [3, 10])


async def test_read_range_stops_at_a_hole_and_never_serves_past_it(node: Node) -> None:
    async with node.bookie() as bookie:
        for entry_id in (0, 1, 3, 4):
            await bookie.add(1, entry_id, payload(1, entry_id), -1)
        assert await bookie.read_range(1, 0, 4, 1 << 20) == [payload(1, 0), payload(1, 1)]
        with pytest.raises(NoSuchEntry):
            await bookie.read_range(1, 2, 4, 1 << 20)


async def test_adding_the_same_entry_again_is_idempotent(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 3)
        await bookie.add(1, 1, payload(1, 1), 0)
        assert await bookie.read_range(1, 0, 2, 1 << 20) == [payload(1, i) for i in range(3)]
        assert bookie.last_entry_id(1) == 2


async def test_thousands_of_concurrent_adds_are_group_committed_durable_and_readable(node: Node) -> None:
    count = 2_000
    async with node.bookie() as bookie:
        flushes_before = sum(bookie.flush_counts.values())
        futures = [bookie.add(1, i, payload(1, i), i - 1) for i in range(count)]
        await asyncio.gather(*futures)
        flushes = sum(bookie.flush_counts.values()) - flushes_before
        assert 1 <= flushes < count, f"{flushes} journal flushes for {count} adds: no group commit"
        assert await bookie.read_range(1, 0, count - 1, 1 << 30) == [payload(1, i) for i in range(count)]
    async with node.bookie() as bookie:  # durable: survives a restart
        assert await bookie.read_range(1, 0, count - 1, 1 << 30) == [payload(1, i) for i in range(count)]
        assert bookie.last_entry_id(1) == count - 1


async def test_concurrent_adds_to_many_ledgers_are_each_readable(node: Node) -> None:
    async with node.bookie() as bookie:
        await asyncio.gather(*(bookie.add(ledger, i, payload(ledger, i), i - 1)
                               for i in range(100) for ledger in range(1, 6)))
        for ledger in range(1, 6):
            assert await bookie.read_range(ledger, 0, 99, 1 << 30) == [payload(ledger, i) for i in range(100)]


# --- LAC and fencing ------------------------------------------------------------------------------


async def test_last_add_confirmed_follows_the_piggybacked_lac_and_never_goes_back(node: Node) -> None:
    async with node.bookie() as bookie:
        with pytest.raises(NoSuchLedger, match="7"):
            await bookie.last_add_confirmed(7)
        await bookie.add(7, 0, b"a", -1)
        assert await bookie.last_add_confirmed(7) == -1
        await bookie.add(7, 1, b"b", 0)
        assert await bookie.last_add_confirmed(7) == 0
        await bookie.add(7, 3, b"d", 2)
        assert await bookie.last_add_confirmed(7) == 2
        await bookie.add(7, 2, b"c", 1)  # a late add carrying an older LAC
        assert await bookie.last_add_confirmed(7) == 2
    async with node.bookie() as bookie:
        assert await bookie.last_add_confirmed(7) == 2


async def test_fence_returns_the_last_stored_entry_id(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 5)
        assert await bookie.fence(1) == 4
        assert await bookie.fence(1) == 4  # idempotent
        assert await bookie.fence(2) == -1  # nothing stored


async def test_adds_after_fence_raise_ledger_fenced_but_recovery_adds_are_accepted(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 3)
        await bookie.fence(1)
        assert bookie.is_fenced(1)
        with pytest.raises(LedgerFenced, match="ledger 1 is fenced"):
            await bookie.add(1, 3, payload(1, 3), 2)
        with pytest.raises(NoSuchEntry):
            await bookie.read(1, 3)
        await bookie.add(1, 3, payload(1, 3), 2, recovery=True)
        assert await bookie.read(1, 3) == payload(1, 3)
        await bookie.add(2, 0, b"other ledgers are not fenced", -1)
        assert not bookie.is_fenced(2)


async def test_fence_is_durable_across_a_restart(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 3)
        await bookie.fence(1)
    async with node.bookie() as bookie:
        assert bookie.is_fenced(1)
        with pytest.raises(LedgerFenced):
            await bookie.add(1, 3, b"late", 2)
        assert await bookie.fence(1) == 2


async def test_fence_of_an_empty_ledger_is_durable_across_a_restart(node: Node) -> None:
    async with node.bookie() as bookie:
        assert await bookie.fence(5) == -1
    async with node.bookie() as bookie:
        assert bookie.is_fenced(5)
        with pytest.raises(LedgerFenced):
            await bookie.add(5, 0, b"too late", -1)


# --- restart recovery -----------------------------------------------------------------------------


async def test_entries_survive_close_and_reopen(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 50)
        await write_entries(bookie, 2, 10)
    async with node.bookie() as bookie:
        assert bookie.recovery_report.dropped == []
        await assert_readable(bookie, 1, 50)
        await assert_readable(bookie, 2, 10)
        assert await bookie.last_add_confirmed(1) == 48
        assert bookie.last_entry_id(2) == 9


async def crash_before_indexing_last_entry(node: Node) -> fmt.Record:
    """Leave the directory as a crash would: entries 0..3 of ledger 1 are acknowledged and indexed; the
    journal also holds entry 4 in the last segment, which the index never learnt about (the index is
    written only after the journal fsync, so after a crash it can lag the journal, never lead it)."""
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 4)
    snapshot = node.base / "index-before-entry-4"
    shutil.copytree(node.index_dir, snapshot)
    async with node.bookie() as bookie:
        await bookie.add(1, 4, payload(1, 4), 3)
    shutil.rmtree(node.index_dir)
    shutil.copytree(snapshot, node.index_dir)
    last = node.records(node.segments()[-1])
    assert [(r.ledger_id, r.entry_id) for r in last] == [(1, 4)]
    return last[0]


@pytest.mark.parametrize("keep", [3, fmt.RECORD_HEADER.size, fmt.RECORD_OVERHEAD + 5])
async def test_torn_tail_is_dropped_and_reported_and_earlier_entries_stay_readable(node: Node, keep: int) -> None:
    record = await crash_before_indexing_last_entry(node)
    last_segment_id = node.segments()[-1]
    path = node.segment_path(last_segment_id)
    os.truncate(path, record.offset + keep)  # the crash tore entry 4 mid-record
    async with node.bookie() as bookie:
        (dropped,) = bookie.recovery_report.dropped
        assert dropped[:3] == (last_segment_id, record.offset, keep)
        assert "truncated" in dropped[3]
        assert path.stat().st_size == record.offset  # the tail is cut off the segment
        await assert_readable(bookie, 1, 4)
        with pytest.raises(NoSuchEntry, match="ledger 1 entry 4"):
            await bookie.read(1, 4)
        assert bookie.last_entry_id(1) == 3
        await bookie.add(1, 4, b"rewritten", 3)  # the journal goes on in a new segment
        assert await bookie.read(1, 4) == b"rewritten"
    async with node.bookie() as bookie:
        assert bookie.recovery_report.dropped == []
        assert await bookie.read(1, 4) == b"rewritten"


async def test_flipped_byte_in_the_last_record_drops_it(node: Node) -> None:
    record = await crash_before_indexing_last_entry(node)
    last_segment_id = node.segments()[-1]
    flip_byte(node.segment_path(last_segment_id), record.offset + record.size - 2)
    async with node.bookie() as bookie:
        assert bookie.recovery_report.dropped == [(last_segment_id, record.offset, record.size,
                                                   "record checksum mismatch")]
        await assert_readable(bookie, 1, 4)
        with pytest.raises(NoSuchEntry):
            await bookie.read(1, 4)


async def test_unindexed_tail_record_is_replayed_after_a_crash(node: Node) -> None:
    await crash_before_indexing_last_entry(node)
    async with node.bookie() as bookie:
        assert bookie.recovery_report.dropped == []
        assert bookie.recovery_report.replayed_records == 1
        await assert_readable(bookie, 1, 5)
        assert bookie.last_entry_id(1) == 4


@pytest.mark.parametrize("junk", [b"\x00\x00\x01\x00garbage" * 10, b"\x07", bytes(4096) + b"\x01"],
                         ids=["plausible-length", "one-byte", "zeros-then-a-byte"])
async def test_junk_tail_after_the_last_record_is_dropped_and_reported(node: Node, junk: bytes) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 6)
    path = node.last_segment()
    good_size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(junk)
    async with node.bookie() as bookie:
        (dropped,) = bookie.recovery_report.dropped
        assert dropped[:3] == (node.segments()[-2], good_size, len(junk))
        assert path.stat().st_size == good_size
        await assert_readable(bookie, 1, 6)


async def test_preallocated_zeros_after_the_last_record_are_cut_and_not_reported_as_loss(node: Node) -> None:
    """What a crash leaves of the segment being written: its records, then its unused space."""
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 6)
    path = node.last_segment()
    good_size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(bytes(1 << 20))
    async with node.bookie() as bookie:
        assert bookie.recovery_report.dropped == []
        assert path.stat().st_size == good_size
        await assert_readable(bookie, 1, 6)


async def test_bit_flip_in_an_indexed_entry_raises_corrupt_entry_and_never_serves_bad_bytes(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 5, size=200)
    (segment_id,) = node.segments()
    victim = node.records(segment_id)[2]
    assert (victim.ledger_id, victim.entry_id) == (1, 2)
    flip_byte(node.segment_path(segment_id), victim.offset + victim.size - 50)  # inside the payload
    async with node.bookie() as bookie:
        assert bookie.recovery_report.dropped == []  # the index already covers it: no rescan
        with pytest.raises(CorruptEntry, match="ledger 1 entry 2: record checksum mismatch"):
            await bookie.read(1, 2)
        with pytest.raises(CorruptEntry, match="ledger 1 entry 2"):
            await bookie.read_range(1, 0, 4, 1 << 20)
        assert await bookie.read_range(1, 0, 1, 1 << 20) == [payload(1, 0, 200), payload(1, 1, 200)]
        assert await bookie.read(1, 3) == payload(1, 3, 200)


async def test_indexed_entry_whose_bytes_vanished_raises_corrupt_entry_not_no_such_entry(node: Node) -> None:
    """Bytes lost below the index checkpoint were acknowledged: answering 'no such entry' would let
    ledger recovery truncate the ledger, so the entry stays known and is refused as corrupt."""
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 5)
    (segment_id,) = node.segments()
    last = node.records(segment_id)[-1]
    os.truncate(node.segment_path(segment_id), last.offset + 10)
    async with node.bookie() as bookie:
        await assert_readable(bookie, 1, 4)
        with pytest.raises(CorruptEntry, match="ledger 1 entry 4"):
            await bookie.read(1, 4)


# --- the index ------------------------------------------------------------------------------------


async def write_two_ledgers_one_fenced(node: Node) -> None:
    async with node.bookie(SMALL_SEGMENTS) as bookie:
        await write_entries(bookie, 1, 40, size=64 * 1024)
        await bookie.fence(1)
        await write_entries(bookie, 2, 30, size=1000)
    async with node.bookie(SMALL_SEGMENTS) as bookie:  # a second segment series after a restart
        await write_entries(bookie, 2, 10, first=30, size=1000)
        await bookie.add(2, 40, payload(2, 40, 1000), 39)
    assert len(node.segments()) >= 3


async def assert_two_ledgers_intact(bookie: Bookie) -> None:
    assert bookie.is_fenced(1)
    assert not bookie.is_fenced(2)
    with pytest.raises(LedgerFenced):
        await bookie.add(1, 40, b"late", 39)
    assert await bookie.read_range(1, 0, 39, 1 << 30) == [payload(1, i, 64 * 1024) for i in range(40)]
    assert await bookie.read_range(2, 0, 40, 1 << 30) == [payload(2, i, 1000) for i in range(41)]
    assert await bookie.last_add_confirmed(1) == 38
    assert await bookie.last_add_confirmed(2) == 39
    assert (bookie.last_entry_id(1), bookie.last_entry_id(2)) == (39, 40)


async def test_deleted_index_is_rebuilt_from_the_journal_with_fence_flags_intact(node: Node) -> None:
    await write_two_ledgers_one_fenced(node)
    shutil.rmtree(node.index_dir)
    async with node.bookie(SMALL_SEGMENTS) as bookie:
        assert bookie.recovery_report.index_rebuilt
        assert bookie.recovery_report.dropped == []
        assert bookie.recovery_report.replayed_records == 40 + 1 + 41
        await assert_two_ledgers_intact(bookie)
    async with node.bookie(SMALL_SEGMENTS) as bookie:
        assert not bookie.recovery_report.index_rebuilt
        await assert_two_ledgers_intact(bookie)


@pytest.mark.parametrize("garbage", ["random", "zeros", "empty", "tail"])
async def test_garbage_index_data_file_is_rebuilt_and_every_entry_served(node: Node, garbage: str) -> None:
    await write_two_ledgers_one_fenced(node)
    data_file = node.index_dir / "data.mdb"
    size = data_file.stat().st_size
    if garbage == "random":
        data_file.write_bytes(random.Random(11).randbytes(size))
    elif garbage == "zeros":
        data_file.write_bytes(bytes(size))
    elif garbage == "empty":
        data_file.write_bytes(b"")
    else:  # keep the meta pages, trash every data page
        raw = bytearray(data_file.read_bytes())
        raw[2 * 4096:] = random.Random(12).randbytes(len(raw) - 2 * 4096)
        data_file.write_bytes(bytes(raw))
    async with node.bookie(SMALL_SEGMENTS) as bookie:
        assert bookie.recovery_report.index_rebuilt
        await assert_two_ledgers_intact(bookie)


async def test_rewound_checkpoint_replays_the_journal_and_everything_stays_readable(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 20)
        await bookie.fence(1)
        await write_entries(bookie, 2, 5)
        await bookie.add(2, 5, payload(2, 5), 4)
    (segment_id,) = node.segments()
    records = node.records(segment_id)
    index = LedgerIndex(node.index_dir)
    try:
        assert index.checkpoint() == (segment_id, records[-1].offset + records[-1].size)
        index.apply([], segment_id, records[10].offset)  # as if the index had been synced long ago
    finally:
        index.close()
    async with node.bookie() as bookie:
        report = bookie.recovery_report
        assert (report.replayed_records, report.index_rebuilt, report.dropped) == (len(records) - 10, False, [])
        await assert_readable(bookie, 1, 20)
        await assert_readable(bookie, 2, 6)
        assert bookie.is_fenced(1) and not bookie.is_fenced(2)
        assert await bookie.last_add_confirmed(2) == 4


async def test_checkpoint_naming_a_missing_segment_rebuilds_the_index(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 5)
    index = LedgerIndex(node.index_dir)
    try:
        index.apply([], 999, fmt.SEGMENT_HEADER.size)
    finally:
        index.close()
    async with node.bookie() as bookie:
        assert bookie.recovery_report.index_rebuilt
        await assert_readable(bookie, 1, 5)


# --- cookie ---------------------------------------------------------------------------------------


async def test_fresh_directory_gets_a_cookie_matching_the_metadata_store(node: Node) -> None:
    async with node.bookie():
        pass
    local = (node.dir / "COOKIE").read_bytes()
    doc = json.loads(local)
    assert doc["format"] == 1 and doc["bookie_id"] == "local" and len(doc["instance_id"]) == 32
    stored = await node.metadata.get("/bookies/local/cookie")
    assert stored is not None and stored.value == local
    async with node.bookie():  # and the next start agrees with it
        pass
    assert (node.dir / "COOKIE").read_bytes() == local


async def test_deleted_cookie_file_with_data_present_is_refused(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 2)
    (node.dir / "COOKIE").unlink()
    with pytest.raises(CookieMismatch, match="has no cookie but bookie local is registered"):
        await Bookie.open(node.dir, StorageConfig(), node.metadata)


async def test_wiped_directory_is_refused_when_the_metadata_store_knows_the_bookie(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 2)
    shutil.rmtree(node.dir)
    with pytest.raises(CookieMismatch, match="directory wiped"):
        await Bookie.open(node.dir, StorageConfig(), node.metadata)


async def test_cookie_of_another_instance_is_refused(node: Node) -> None:
    async with node.bookie():
        pass
    path = node.dir / "COOKIE"
    doc = json.loads(path.read_bytes())
    doc["instance_id"] = "0" * 32
    path.write_bytes(json.dumps(doc).encode())
    with pytest.raises(CookieMismatch, match="belongs to another instance than bookie local"):
        await Bookie.open(node.dir, StorageConfig(), node.metadata)


async def test_cookie_unknown_to_the_metadata_store_is_refused(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 2)
    await node.metadata.delete("/bookies/local/cookie")
    with pytest.raises(CookieMismatch, match="that the metadata store does not know"):
        await Bookie.open(node.dir, StorageConfig(), node.metadata)


async def test_journal_data_without_any_cookie_is_refused(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 2)
    (node.dir / "COOKIE").unlink()
    await node.metadata.delete("/bookies/local/cookie")
    with pytest.raises(CookieMismatch, match="holds journal data but no cookie"):
        await Bookie.open(node.dir, StorageConfig(), node.metadata)


# --- segments and garbage collection --------------------------------------------------------------


async def test_journal_rolls_segments_and_all_entries_are_readable_after_reopen(node: Node) -> None:
    entry_size = 64 * 1024
    count = 80  # 5 MiB
    async with node.bookie(SMALL_SEGMENTS) as bookie:
        for start in range(0, count, 8):
            await asyncio.gather(*(bookie.add(1, i, payload(1, i, entry_size), i - 1)
                                   for i in range(start, start + 8)))
    segments = node.segments()
    assert len(segments) >= 5
    assert segments == list(range(segments[0], segments[0] + len(segments)))
    assert sorted(r.entry_id for s in segments for r in node.records(s)) == list(range(count))
    async with node.bookie(SMALL_SEGMENTS) as bookie:
        assert bookie.recovery_report.dropped == []
        assert await bookie.read_range(1, 0, count - 1, 1 << 40) == [payload(1, i, entry_size) for i in range(count)]


async def test_garbage_collection_removes_sealed_segments_holding_only_deleted_ledgers(node: Node) -> None:
    entry_size = 64 * 1024
    async with node.bookie(SMALL_SEGMENTS) as bookie:
        await write_entries(bookie, 1, 48, size=entry_size)   # ~3 MiB of ledger 1
        await write_entries(bookie, 2, 40, size=entry_size)   # ~2.5 MiB of ledger 2
        await write_entries(bookie, 3, 2, size=100)
        before = node.segments()
        current = before[-1]
        ledgers_in = {s: {r.ledger_id for r in node.records(s) if r.kind is fmt.RecordKind.ENTRY} for s in before}
        expected_removed = [s for s in before if s != current and ledgers_in[s] <= {1}]
        expected_kept = [s for s in before if s not in expected_removed]
        assert expected_removed, ledgers_in
        assert any(s != current and 2 in ledgers_in[s] for s in expected_kept), ledgers_in

        assert await bookie.collect_garbage() == []  # nothing deleted yet: every segment is in use
        await bookie.delete_ledger(1)
        await bookie.delete_ledger(1)  # idempotent
        removed = await bookie.collect_garbage()
        assert removed == expected_removed
        remaining = node.segments()
        assert set(remaining).isdisjoint(expected_removed)
        assert set(expected_kept) <= set(remaining)
        with pytest.raises(NoSuchEntry):
            await bookie.read(1, 0)
        assert await bookie.read_range(2, 0, 39, 1 << 40) == [payload(2, i, entry_size) for i in range(40)]
        assert await bookie.collect_garbage() == []
    async with node.bookie(SMALL_SEGMENTS) as bookie:
        assert bookie.recovery_report.dropped == []
        assert await bookie.read_range(2, 0, 39, 1 << 40) == [payload(2, i, entry_size) for i in range(40)]
        await assert_readable(bookie, 3, 2, size=100)
        with pytest.raises(NoSuchEntry):
            await bookie.read(1, 47)


async def test_deleting_the_highest_numbered_ledger_keeps_the_bookie_writable_and_reopenable(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 3)
        await write_entries(bookie, 9, 3)
        await bookie.delete_ledger(9)  # its entries are the last keys of the index
        assert not bookie.is_read_only
        await write_entries(bookie, 2, 2)
        with pytest.raises(NoSuchEntry):
            await bookie.read(9, 0)
    shutil.rmtree(node.index_dir)  # the rebuild replays the delete record too
    async with node.bookie() as bookie:
        assert bookie.recovery_report.index_rebuilt
        await assert_readable(bookie, 1, 3)
        await assert_readable(bookie, 2, 2)
        with pytest.raises(NoSuchEntry):
            await bookie.read(9, 2)
        with pytest.raises(NoSuchLedger):
            await bookie.last_add_confirmed(9)


async def test_garbage_collection_never_removes_the_segment_being_written(node: Node) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 3)
        await bookie.delete_ledger(1)
        (current,) = node.segments()
        assert await bookie.collect_garbage() == []
        assert node.segments() == [current]
        await write_entries(bookie, 2, 2)
        await assert_readable(bookie, 2, 2)


async def test_fence_survives_garbage_collection_of_its_segment_and_an_index_rebuild(node: Node) -> None:
    async with node.bookie(SMALL_SEGMENTS) as bookie:
        await bookie.add(2, 0, b"x", -1)
        await write_entries(bookie, 1, 40, size=64 * 1024)
        await bookie.fence(2)  # lands in a segment that otherwise holds only ledger 1
        await write_entries(bookie, 1, 20, first=40, size=64 * 1024)
        await bookie.add(3, 0, b"z", -1)
        await bookie.delete_ledger(1)
        assert await bookie.collect_garbage()
        assert bookie.is_fenced(2)
    shutil.rmtree(node.index_dir)
    async with node.bookie(SMALL_SEGMENTS) as bookie:
        assert bookie.recovery_report.index_rebuilt
        assert bookie.is_fenced(2)


# --- a failed fsync -------------------------------------------------------------------------------


async def test_failed_fsync_fails_the_add_and_turns_the_bookie_read_only_for_good(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 2)
        calls = []

        def failing_fdatasync(fd: int) -> None:
            calls.append(fd)
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr("storage.bookie.journal.os.fdatasync", failing_fdatasync)
        with pytest.raises(BookieReadOnly, match="journal failed: .*Input/output error"):
            await bookie.add(1, 2, payload(1, 2), 1)
        assert calls
        assert bookie.is_read_only
        monkeypatch.undo()

        late = bookie.add(1, 3, payload(1, 3), 1)
        assert late.done()  # refused at once, never queued for a retry
        with pytest.raises(BookieReadOnly, match="read-only"):
            await late
        with pytest.raises(BookieReadOnly):
            await bookie.fence(2)
        with pytest.raises(NoSuchEntry):
            await bookie.read(1, 2)  # never acknowledged, never indexed
        await assert_readable(bookie, 1, 2)  # what was durable before stays readable
        assert len(calls) == 1


# --- directory entries ----------------------------------------------------------------------------


async def test_opening_fsyncs_the_bookie_directory_and_its_parent(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    # Creating bookie/ and bookie/journal/ is durable only once their parents are fsynced; a power
    # loss could otherwise drop the whole directory with every acknowledged entry in it.
    synced = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr("storage.bookie.journal.os.fsync", recording_fsync)
    async with node.bookie():
        pass
    assert {str(node.dir.resolve()), str(node.base.resolve())} <= set(synced)


async def test_ledgers_deleted_while_a_bookie_was_away_are_dropped_on_the_second_pass(node: Node) -> None:
    from storage.bookie.orphans import OrphanCollector

    async with node.bookie() as bookie:
        for ledger_id in (1, 2, 3):
            await bookie.add(ledger_id, 0, b"entry", -1)
        await node.metadata.put("/ledgers/1", b"{}")   # 1 exists; 2 and 3 were deleted meanwhile
        await node.metadata.put("/ledgers/3", b"{}")
        collector = OrphanCollector(bookie, node.metadata)
        assert await collector.collect() == []        # first sight: only suspected
        await node.metadata.delete("/ledgers/3")
        assert await collector.collect() == [2]       # 3 is new to the list of suspects
        assert sorted(bookie.ledger_ids()) == [1, 3]
        assert await collector.collect() == [3]
        assert await bookie.read(1, 0) == b"entry"

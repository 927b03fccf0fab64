"""Media damage in a bookie's acknowledged data, forged exactly: a single flipped bit in a sealed
journal segment (which is also the entry log reads are served from), a torn page in one, a bad
sealed segment header, and an index entry pointing at the wrong record. Whatever is damaged is never
served; the segment is kept and marked (storage/bookie/damage.py); and an entry the bookie can no
longer find is answered as unknown (CorruptEntry), never as missing, so a ledger recovery cannot
conclude that an acknowledged entry was never written. (Damage the index already covers is found by
the read's checksum: test_bookie.py.)"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.api import CorruptEntry, NoSuchEntry
from storage.bookie import damage
from storage.bookie import journal_format as fmt
from storage.bookie.index import LedgerIndex
from storage.bookie.journal import Written
from storage.metadata.sqlite import SqliteMetadataStore
from tests.storage.test_bookie import SMALL_SEGMENTS, Node, payload, write_entries

ENTRY = 64 * 1024
PAGE = 4096


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(tmp_path)
    n.metadata = await SqliteMetadataStore.open(tmp_path / "metadata.db")
    try:
        yield n
    finally:
        await n.metadata.close()


async def two_sealed_segments_and_more(node: Node) -> tuple[int, list[fmt.Record]]:
    """Ledger 1 over several 1 MiB segments; returns the first segment (sealed) and its records."""
    async with node.bookie(SMALL_SEGMENTS) as bookie:
        await write_entries(bookie, 1, 48, size=ENTRY)
    segments = node.segments()
    assert len(segments) >= 3
    return segments[0], node.records(segments[0])


def flip_bit(path: Path, offset: int, bit: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ (1 << bit)]))


def tear_page(path: Path, offset: int, garbage: bool) -> None:
    """The 4 KiB page holding `offset` as a torn write leaves it: zeros, or another write's bytes."""
    start = offset - offset % PAGE
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(random.Random(start).randbytes(PAGE) if garbage else bytes(PAGE))


def damage_record(path: Path, record: fmt.Record, how: str) -> None:
    if how == "bit-in-length":
        flip_bit(path, record.offset + 1, 3)                  # the body length: the scan loses its footing
    elif how == "bit-in-payload":
        flip_bit(path, record.offset + record.size - 100, 0)  # only the checksum can tell
    elif how == "torn-page-zeros":
        tear_page(path, record.offset + 4, garbage=False)
    else:
        tear_page(path, record.offset + 4, garbage=True)


@pytest.mark.parametrize("how", ["bit-in-length", "bit-in-payload", "torn-page-zeros", "torn-page-garbage"])
async def test_damage_in_a_sealed_segment_found_by_an_index_rebuild_is_kept_marked_and_never_served(
        node: Node, how: str) -> None:
    segment_id, records = await two_sealed_segments_and_more(node)
    victim = records[len(records) // 2]
    path = node.segment_path(segment_id)
    size = path.stat().st_size
    damage_record(path, victim, how)
    shutil.rmtree(node.index_dir)      # the rebuild scans the damaged segment again
    for run in ("rebuilt", "reopened"):
        async with node.bookie(SMALL_SEGMENTS) as bookie:
            report = bookie.recovery_report
            assert report.index_rebuilt == (run == "rebuilt")
            assert list(report.damaged) == [segment_id] and report.damaged[segment_id][0] <= victim.offset
            assert report.dropped == []
            assert path.stat().st_size == size, "a sealed segment is never cut"
            assert damage.marker_path(node.journal_dir, segment_id).exists()
            first_bad = next(r.entry_id for r in records if r.offset + r.size > report.damaged[segment_id][0])
            for entry_id in range(48):
                if first_bad <= entry_id <= records[-1].entry_id:
                    with pytest.raises(CorruptEntry, match="may have been there"):
                        await bookie.read(1, entry_id)
                else:
                    assert await bookie.read(1, entry_id) == payload(1, entry_id, ENTRY)
            with pytest.raises(CorruptEntry):      # unknown, not missing, while a segment is damaged
                await bookie.read(7, 0)
            with pytest.raises(CorruptEntry):
                await bookie.read_entries(1, [0, first_bad])
            assert await bookie.read_range(1, 0, 47, 1 << 40) == [payload(1, i, ENTRY) for i in range(first_bad)]


async def test_a_sealed_segment_with_a_bad_header_is_kept_and_marked_not_emptied(node: Node) -> None:
    segment_id, records = await two_sealed_segments_and_more(node)
    path = node.segment_path(segment_id)
    size = path.stat().st_size
    flip_bit(path, 1, 2)                   # inside the magic
    shutil.rmtree(node.index_dir)
    async with node.bookie(SMALL_SEGMENTS) as bookie:
        assert bookie.recovery_report.damaged[segment_id][0] == 0
        assert path.stat().st_size == size
        with pytest.raises(CorruptEntry):
            await bookie.read(1, records[0].entry_id)
        assert await bookie.read(1, 47) == payload(1, 47, ENTRY)


async def test_a_damaged_segment_outlives_the_deletion_of_the_ledgers_known_in_it(node: Node) -> None:
    segment_id, records = await two_sealed_segments_and_more(node)
    flip_bit(node.segment_path(segment_id), records[1].offset + 1, 3)
    shutil.rmtree(node.index_dir)
    async with node.bookie(SMALL_SEGMENTS) as bookie:
        await bookie.delete_ledger(1)
        assert segment_id not in await bookie.collect_garbage()
        assert node.segment_path(segment_id).exists()


async def test_a_missing_entry_is_no_such_entry_again_once_the_operator_removes_the_marker(node: Node) -> None:
    segment_id, records = await two_sealed_segments_and_more(node)
    flip_bit(node.segment_path(segment_id), records[1].offset + 1, 3)
    shutil.rmtree(node.index_dir)
    async with node.bookie(SMALL_SEGMENTS) as bookie:
        with pytest.raises(CorruptEntry):
            await bookie.read(7, 0)
    os.unlink(damage.marker_path(node.journal_dir, segment_id))
    async with node.bookie(SMALL_SEGMENTS) as bookie:
        assert bookie.recovery_report.damaged == {}
        with pytest.raises(NoSuchEntry):
            await bookie.read(7, 0)


async def test_an_index_entry_pointing_at_another_record_is_refused_not_served(node: Node) -> None:
    """A flipped bit in an index value that LMDB cannot notice: the record read back names another
    entry, so the read is refused as corrupt rather than handing out entry 2's bytes as entry 3."""
    async with node.bookie() as bookie:
        await write_entries(bookie, 1, 5)
    (segment_id,) = node.segments()
    records = node.records(segment_id)
    index = LedgerIndex(node.index_dir)
    try:
        checkpoint = index.checkpoint()
        wrong = records[2]
        index.apply([Written(fmt.RecordKind.ENTRY, 1, 3, 2, segment_id, wrong.offset, wrong.size)], *checkpoint)
    finally:
        index.close()
    async with node.bookie() as bookie:
        with pytest.raises(CorruptEntry, match="index points at another entry"):
            await bookie.read(1, 3)
        assert await bookie.read(1, 2) == payload(1, 2)

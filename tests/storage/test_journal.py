"""Who flushes the journal: the event loop, for an add that finds it idle, or the journal thread,
for everything that arrives while it is busy, for bursts and behind a slow disk. Either way every
add is durable before its future resolves, and the records land in the file in the order added.
The segment being written is preallocated; sealed and closed ones are cut back to their records."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.api import BookieReadOnly
from storage.bookie import journal as journal_module
from storage.bookie import journal_format as fmt
from storage.bookie.group_commit import FlushReason, GroupCommitPolicy
from storage.bookie.journal import INLINE_MAX_BYTES, INLINE_MAX_FSYNC_S, PREALLOCATE_BYTES, Journal, Written

SEGMENT_ID = 1


class Recorder:
    """The journal's callbacks: which thread indexed each flush, and the flush reasons."""

    def __init__(self) -> None:
        self.flushes: list[tuple[int, list[int]]] = []     # (thread id, entry ids) per flush
        self.reasons: list[FlushReason] = []
        self.durable: list[int] = []

    def on_flushed(self, written: list[Written], segment_id: int, offset: int) -> None:
        self.flushes.append((threading.get_ident(), [record.entry_id for record in written]))

    def on_durable(self, written: list[Written]) -> None:
        self.durable += [record.entry_id for record in written]

    def count(self, reason: FlushReason) -> None:
        self.reasons.append(reason)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def journal(tmp_path: Path, recorder: Recorder) -> AsyncIterator[Journal]:
    journal = Journal(tmp_path, SEGMENT_ID, GroupCommitPolicy(), 64 << 20, recorder.on_flushed,
                      recorder.on_durable, recorder.count)
    try:
        yield journal
    finally:
        await journal.close()


def add(journal: Journal, entry_id: int, size: int = 100) -> asyncio.Future:
    return journal.append(fmt.RecordKind.ENTRY, 7, entry_id, entry_id - 1, bytes([entry_id % 256]) * size)


def entry_ids_in_file(directory: Path) -> list[int]:
    fd = os.open(directory / fmt.segment_name(SEGMENT_ID), os.O_RDONLY)
    try:
        records = list(fmt.scan(fd, fmt.SEGMENT_HEADER.size, os.fstat(fd).st_size))
    finally:
        os.close(fd)
    if records and isinstance(records[-1], fmt.ScanStop) and records[-1].preallocated:
        records.pop()        # still being written: its unused space
    assert all(isinstance(record, fmt.Record) for record in records)
    return [record.entry_id for record in records]


def slow_fdatasync(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        time.sleep(seconds)
        real(fd)

    monkeypatch.setattr(journal_module.os, "fdatasync", fdatasync)


async def test_a_lone_add_to_an_idle_journal_is_flushed_by_the_event_loop(journal: Journal, recorder: Recorder) -> None:
    await add(journal, 0)
    assert recorder.reasons == [FlushReason.INLINE]
    assert recorder.flushes == [(threading.get_ident(), [0])]
    assert recorder.durable == [0]


async def test_the_adds_of_one_loop_turn_share_the_loops_flush(journal: Journal, recorder: Recorder) -> None:
    await asyncio.gather(*(add(journal, i) for i in range(10)))
    assert recorder.reasons == [FlushReason.INLINE]
    assert recorder.flushes == [(threading.get_ident(), list(range(10)))]


async def test_a_burst_in_one_turn_goes_to_the_thread(journal: Journal, recorder: Recorder, tmp_path: Path) -> None:
    count = INLINE_MAX_BYTES // 10_000 + 5
    await asyncio.gather(*(add(journal, i, size=10_000) for i in range(count)))
    assert FlushReason.INLINE not in recorder.reasons
    assert all(thread != threading.get_ident() for thread, _ in recorder.flushes)
    assert [i for _, ids in recorder.flushes for i in ids] == list(range(count))
    assert entry_ids_in_file(tmp_path) == list(range(count))


async def test_behind_a_slow_disk_the_thread_flushes(journal: Journal, recorder: Recorder,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    slow_fdatasync(monkeypatch, INLINE_MAX_FSYNC_S * 2)
    await add(journal, 0)                   # idle, and no fsync measured yet: the loop's
    await asyncio.sleep(INLINE_MAX_FSYNC_S * 4)
    await add(journal, 1)                   # idle again, but that fsync was slow
    assert recorder.reasons == [FlushReason.INLINE, FlushReason.IDLE]
    assert recorder.flushes[0][0] == threading.get_ident()
    assert recorder.flushes[1][0] != threading.get_ident()


async def test_adds_right_after_a_flush_go_to_the_thread_and_land_in_order(
        journal: Journal, recorder: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An fsync just under the limit: an add within that time of the last flush finds the journal
    # busy, one a few milliseconds later finds it idle.
    slow_fdatasync(monkeypatch, INLINE_MAX_FSYNC_S * 0.9)
    expected = []
    for round_ in range(5):
        first = round_ * 3
        await add(journal, first)
        await asyncio.gather(add(journal, first + 1), add(journal, first + 2))
        expected += [first, first + 1, first + 2]
        await asyncio.sleep(INLINE_MAX_FSYNC_S * 2)
    assert FlushReason.INLINE in recorder.reasons and FlushReason.IDLE in recorder.reasons
    assert [i for _, ids in recorder.flushes for i in ids] == expected
    assert recorder.durable == expected
    assert entry_ids_in_file(tmp_path) == expected


async def test_close_flushes_what_the_loop_was_about_to(tmp_path: Path, recorder: Recorder) -> None:
    journal = Journal(tmp_path, SEGMENT_ID, GroupCommitPolicy(), 64 << 20, recorder.on_flushed,
                      recorder.on_durable, recorder.count)
    pending = add(journal, 0)               # a loop flush is due at the end of this turn
    await journal.close()
    assert entry_ids_in_file(tmp_path) == [0]
    await asyncio.sleep(0)
    assert pending.done() and pending.exception() is None


@pytest.mark.parametrize("size", [100, 10_000], ids=["loop", "thread"])
async def test_a_failed_fsync_fails_the_adds_of_either_flusher(journal: Journal, recorder: Recorder, size: int,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(journal_module.os, "fdatasync", failing)
    count = 1 if size == 100 else INLINE_MAX_BYTES // size + 5
    results = await asyncio.gather(*(add(journal, i, size=size) for i in range(count)), return_exceptions=True)
    assert all(isinstance(result, BookieReadOnly) for result in results)
    assert journal.failure is not None
    assert (recorder.reasons[0] is FlushReason.INLINE) == (size == 100)
    later = add(journal, count)
    assert later.done() and isinstance(later.exception(), BookieReadOnly)


def segment_sizes(directory: Path) -> list[int]:
    return [(directory / fmt.segment_name(segment_id)).stat().st_size
            for segment_id in journal_module.list_segments(directory)]


def written_end(directory: Path, segment_id: int) -> int:
    """Where the segment's last record ends, and that nothing but preallocated space follows it."""
    fd = os.open(directory / fmt.segment_name(segment_id), os.O_RDONLY)
    try:
        stop = list(fmt.scan(fd, fmt.SEGMENT_HEADER.size, os.fstat(fd).st_size))[-1]
    finally:
        os.close(fd)
    assert isinstance(stop, fmt.ScanStop) and stop.preallocated
    return stop.offset


async def test_the_segment_being_written_is_preallocated_and_cut_back_on_close(
        tmp_path: Path, recorder: Recorder) -> None:
    journal = Journal(tmp_path, SEGMENT_ID, GroupCommitPolicy(), 64 << 20, recorder.on_flushed,
                      recorder.on_durable, recorder.count)
    await asyncio.gather(*(add(journal, i) for i in range(10)))
    (size,) = segment_sizes(tmp_path)
    end = written_end(tmp_path, SEGMENT_ID)    # what a crash now would leave
    assert size >= end + PREALLOCATE_BYTES - 10 * 200
    await journal.close()
    assert segment_sizes(tmp_path) == [end]
    assert entry_ids_in_file(tmp_path) == list(range(10))


async def test_a_sealed_segment_is_cut_back_to_its_records(tmp_path: Path, recorder: Recorder) -> None:
    journal = Journal(tmp_path, SEGMENT_ID, GroupCommitPolicy(), 1 << 20, recorder.on_flushed,
                      recorder.on_durable, recorder.count)
    try:
        for i in range(30):      # 100 KiB each: a roll about every ten
            await add(journal, i, size=100_000)
        sealed = journal_module.list_segments(tmp_path)[:-1]
        assert len(sealed) >= 2
        for segment_id, size in zip(sealed, segment_sizes(tmp_path)):
            assert size <= 1 << 20
            fd = os.open(tmp_path / fmt.segment_name(segment_id), os.O_RDONLY)
            try:
                assert all(isinstance(item, fmt.Record) for item in fmt.scan(fd, fmt.SEGMENT_HEADER.size, size))
            finally:
                os.close(fd)
    finally:
        await journal.close()


async def test_without_preallocation_the_segment_grows_as_written(tmp_path: Path, recorder: Recorder,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_module, "preallocate", lambda fd, offset, length: errno.EOPNOTSUPP)
    journal = Journal(tmp_path, SEGMENT_ID, GroupCommitPolicy(), 64 << 20, recorder.on_flushed,
                      recorder.on_durable, recorder.count)
    try:
        for i in range(5):
            await add(journal, i)
            assert segment_sizes(tmp_path) == [fmt.SEGMENT_HEADER.size + (i + 1) * (fmt.RECORD_OVERHEAD + 100)]
    finally:
        await journal.close()
    assert entry_ids_in_file(tmp_path) == list(range(5))

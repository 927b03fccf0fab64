"""A log followed by a process that does not write it (a read-only broker): it sees what the
writer acknowledged, its last entry too once the writer is idle (explicit LAC), across ledger
rolls, and never fences the writer. One in-process bookie, two ledger clients on it."""

from __future__ import annotations

import asyncio
import time

import pytest

from storage.api import PositionOutOfRange, RetentionPolicy
from storage.bookie.bookie import Bookie
from storage.config import StorageConfig
from storage.ledger.client import LedgerClient
from storage.managed_log.factory import ManagedLogFactoryImpl
from storage.metadata.sqlite import SqliteMetadataStore

LOG = "t/n/followed/0"


@pytest.fixture
async def logs(tmp_path):
    metadata = await SqliteMetadataStore.open(tmp_path / "metadata.db")
    bookie = await Bookie.open(tmp_path / "bookie", StorageConfig(), metadata)
    writer = ManagedLogFactoryImpl(LedgerClient(metadata, {"local": bookie}, explicit_lac_s=0.005), metadata)
    reader = ManagedLogFactoryImpl(LedgerClient(metadata, {"local": bookie}), metadata)
    yield writer, reader
    await bookie.close()
    await metadata.close()


async def until(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_a_follower_reads_what_the_writer_acknowledged_up_to_its_last_entry(logs) -> None:
    writer_logs, reader_logs = logs
    log = await writer_logs.open_log(LOG, RetentionPolicy())
    for n in range(3):
        await log.append(b"r%d" % n, 1, n)
    follower = await reader_logs.follow_log(LOG)
    await until(lambda: follower.high_watermark == 3)             # the idle writer's LAC reached it
    assert [bytes(e.payload) for e in await follower.read(0, 1 << 20)] == [b"r0", b"r1", b"r2"]
    with pytest.raises(PositionOutOfRange):
        await follower.read(4, 1 << 20)

    waiting = asyncio.ensure_future(follower.wait_for_append(3, 10.0))
    await log.append(b"r3", 1, 3)                                  # the writer was not fenced
    assert await waiting and follower.high_watermark == 4
    assert reader_logs.tail_cache.used >= len(b"r3")               # read once on the LAC move, cached
    assert [bytes(e.payload) for e in await follower.read(3, 1 << 20)] == [b"r3"]
    assert follower.leader_epoch == log.leader_epoch
    await follower.close()
    await log.close()


async def test_a_follower_reads_on_across_rolls_and_a_closed_log(logs) -> None:
    writer_logs, reader_logs = logs
    log = await writer_logs.open_log(LOG, RetentionPolicy(roll_bytes=1))    # a new ledger per append
    follower = await reader_logs.follow_log(LOG)
    woken = []
    follower.on_append = lambda: woken.append(follower.high_watermark)
    for n in range(5):
        await log.append(b"r%d" % n, 1, n)
    await until(lambda: follower.high_watermark == 5)
    assert [bytes(e.payload) for e in await follower.read(0, 1 << 20)] == [b"r%d" % n for n in range(5)]
    assert woken and woken[-1] == 5
    await log.close()                                               # sealed: nothing left open
    reopened = await writer_logs.open_log(LOG, RetentionPolicy())
    await reopened.append(b"r5", 1, 5)
    await until(lambda: follower.high_watermark == 6)
    assert [bytes(e.payload) for e in await follower.read(5, 1 << 20)] == [b"r5"]
    await follower.close()
    await reopened.close()

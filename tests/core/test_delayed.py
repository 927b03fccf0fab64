"""Delayed messages in the core: the bounded schedule, holding durably, delivering in due order on a
driven clock, and what a restart keeps."""

from __future__ import annotations

import asyncio
import random

import pytest

from core.clock import FakeClock
from core.delayed.held import Target
from core.delayed.schedule import Schedule
from core.delayed.store import CURSOR_NAME, SYSTEM_TOPIC, DelayedStore
from core.names import TopicName
from core.records.builder import Record
from core.service import Core
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage

START_MS = 1_700_000_000_000


async def eventually(condition, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


class Collector:
    """A deliverer that keeps what falls due: (target name, value)."""

    def __init__(self) -> None:
        self.got: list[tuple[str, bytes]] = []
        self.headers: list[tuple] = []

    async def __call__(self, tenant: str, namespace: str, name: str, record: Record) -> list:
        self.got.append((name, record.value))
        self.headers.append(record.headers)
        return []

    def values(self) -> list[bytes]:
        return [value for _, value in self.got]


def message(value: bytes) -> Record:
    return Record(START_MS, key=b"k", value=value, headers=(("h", b"v"),))


# --- the schedule ----------------------------------------------------------------------------------

def test_schedule_pops_in_due_order_not_insertion_order() -> None:
    schedule = Schedule(100)
    for offset, due in enumerate([50, 10, 30, 20, 40]):
        schedule.add(due, offset)
    assert schedule.next_due() == 10
    assert schedule.pop_due(25, 10) == [(10, 1), (20, 3)]
    assert schedule.pop_due(100, 2) == [(30, 2), (40, 4)]
    assert schedule.pop_due(100, 10) == [(50, 0)]
    assert schedule.next_due() is None and not schedule.needs_rescan


def test_schedule_over_its_limit_keeps_the_earliest_and_sets_a_horizon() -> None:
    schedule = Schedule(4)
    for offset in range(5):
        schedule.add(100 - offset, offset)       # due 100, 99, 98, 97, 96
    assert len(schedule) == 2 and schedule.horizon == 98
    assert schedule.pop_due(1000, 10) == [(96, 4), (97, 3)]
    schedule.add(99, 9)              # beyond the horizon: stays on disk only
    assert len(schedule) == 0 and schedule.needs_rescan
    schedule.add(50, 10)             # before the horizon: in memory at once
    assert schedule.pop_due(1000, 10) == [(50, 10)]


def test_a_scan_brings_back_the_earliest_and_merges_what_arrived_meanwhile() -> None:
    schedule = Schedule(3)
    schedule.begin_scan()
    schedule.add(5, 8)               # stored while scanning, after where the scan ends
    schedule.add(7, 2)               # stored while scanning, and the scan saw it too
    for offset, due in [(0, 40), (1, 10), (2, 7), (3, 30), (4, 20)]:
        schedule.offer(due, offset)
    schedule.finish_scan(scanned_to=5)
    assert schedule.horizon == 20
    assert schedule.pop_due(1000, 10) == [(5, 8), (7, 2), (10, 1)]
    assert schedule.needs_rescan


def test_a_failed_scan_keeps_nothing_and_asks_for_another() -> None:
    schedule = Schedule(3)
    schedule.begin_scan()
    schedule.offer(10, 1)
    schedule.abort_scan()
    assert len(schedule) == 0 and schedule.needs_rescan


def test_held_messages_come_out_in_due_order_for_any_insertion_order() -> None:
    rng = random.Random(7)
    schedule = Schedule(16)
    pending = {}
    for offset in range(200):
        due = rng.randrange(1000)
        schedule.add(due, offset)
        pending[offset] = due
    out = []
    while pending:
        if schedule.needs_rescan:      # what a store does: scan the offsets not yet delivered
            schedule.begin_scan()
            for offset, due in pending.items():
                schedule.offer(due, offset)
            schedule.finish_scan(200)
        for due, offset in schedule.pop_due(10_000, 5):
            out.append(due)
            del pending[offset]
    assert out == sorted(out) and len(out) == 200


# --- the store on a real core ---------------------------------------------------------------------

@pytest.fixture
async def storage(tmp_path):
    opened = []

    async def open_core(clock: FakeClock) -> Core:
        storage = await EmbeddedStorage.open(tmp_path / "data", StorageConfig())
        core = Core(storage.metadata, storage.logs, clock)
        await core.start()
        opened.append((core, storage))
        return core

    async def close_all() -> None:
        while opened:
            core, storage = opened.pop()
            await core.close()
            await storage.close()

    open_core.close_all = close_all
    yield open_core
    await close_all()


async def test_messages_are_delivered_when_due_in_due_order(storage) -> None:
    clock = FakeClock(START_MS)
    core = await storage(clock)
    collector = Collector()
    core.delayed.register("test", collector)
    held = [core.delayed.hold("public", "default", message(value), START_MS + delay, Target("test", "x"))
            for value, delay in ((b"late", 3000), (b"early", 1000), (b"middle", 2000))]
    await asyncio.gather(*held)                   # durable in the system topic
    partition = await core.partition(TopicName("public", "default", SYSTEM_TOPIC), 0)
    assert partition.high_watermark == 3          # one batch, three records
    await asyncio.sleep(0.05)
    assert collector.got == []                    # nothing is due yet
    clock.advance(1000)
    await eventually(lambda: collector.values() == [b"early"])
    clock.advance(5000)
    await eventually(lambda: collector.values() == [b"early", b"middle", b"late"])
    assert collector.got[0][0] == "x"
    assert collector.headers[0] == (("h", b"v"),)     # the core's own headers are gone


async def test_a_message_due_earlier_wakes_a_sleeping_store(storage) -> None:
    clock = FakeClock(START_MS)
    core = await storage(clock)
    collector = Collector()
    core.delayed.register("test", collector)
    await core.delayed.hold("public", "default", message(b"far"), START_MS + 60_000, Target("test", "x"))
    await asyncio.sleep(0.05)
    await core.delayed.hold("public", "default", message(b"soon"), START_MS + 100, Target("test", "x"))
    clock.advance(100)
    await eventually(lambda: collector.values() == [b"soon"])


async def test_delays_survive_a_restart_and_delivered_ones_are_not_repeated(storage) -> None:
    clock = FakeClock(START_MS)
    core = await storage(clock)
    first = Collector()
    core.delayed.register("test", first)
    for value, delay in ((b"a", 1000), (b"b", 5000), (b"c", 3000)):
        await core.delayed.hold("public", "default", message(value), START_MS + delay, Target("test", "x"))
    clock.advance(1000)
    await eventually(lambda: first.values() == [b"a"])
    await storage.close_all()

    core = await storage(clock)                    # the store is found again at start
    second = Collector()
    await asyncio.sleep(0.05)
    core.delayed.register("test", second)          # deliverers may come after the start
    clock.advance(10_000)
    await eventually(lambda: second.values() == [b"c", b"b"])
    await storage.close_all()          # persists the cursor
    core = await storage(clock)
    third = Collector()
    core.delayed.register("test", third)
    cursor = await core.cursor(TopicName("public", "default", SYSTEM_TOPIC), 0, CURSOR_NAME)
    assert cursor.committed_offset == 3
    clock.advance(10_000)
    await asyncio.sleep(0.1)
    assert third.got == []


async def test_more_held_messages_than_the_schedule_holds_all_come_out_in_order(storage) -> None:
    clock = FakeClock(START_MS)
    core = await storage(clock)
    collector = Collector()
    store = DelayedStore(core, "public", "default", core.delayed.deliverer, limit=4)
    store.start()
    try:
        core.delayed.register("test", collector)
        rng = random.Random(3)
        dues = [START_MS + rng.randrange(1, 10_000) for _ in range(30)]
        await asyncio.gather(*(store.hold(message(str(due).encode()), due, Target("test", "x")) for due in dues))
        assert len(store.schedule) <= 4
        for _ in range(11):
            clock.advance(1000)
            await asyncio.sleep(0.02)
        await eventually(lambda: len(collector.got) == 30)
        assert collector.values() == [str(due).encode() for due in sorted(dues)]
    finally:
        await store.close()

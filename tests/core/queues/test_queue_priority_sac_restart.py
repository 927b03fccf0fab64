"""Queues in the core: priorities (x-max-priority), single active consumer, what a restart keeps
(persistent messages, the redelivered mark, delivery counts, parked groups) and drops (transient
messages), one-batch publishes and waiting for the position to be saved."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from core.clock import FakeClock
from core.errors import ExclusiveUse, InequivalentDeclaration, InvalidArgument
from core.queues import priority as priority_module
from core.queues import subscription as subscription_module
from core.queues.attributes import GROUP, PRIORITY, TRANSIENT
from core.queues.priority import PriorityReadAhead
from core.queues.service import QueueService, publish
from core.queues.subscription import QueuedMessage
from core.records.builder import Record, build_batch
from core.service import Core
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage
from tests.polling import eventually


class Recorder:
    def __init__(self, prefetch: int = 0) -> None:
        self.prefetch = prefetch
        self.auto_ack = False
        self.open = True
        self.got: list[QueuedMessage] = []
        self.redelivered: list[bool] = []

    def can_deliver(self) -> bool:
        return self.open

    def deliver(self, message: QueuedMessage) -> None:
        self.got.append(message)
        self.redelivered.append(message.redelivered)

    def queue_deleted(self) -> None:
        pass

    def values(self) -> list[bytes]:
        return [m.value for m in self.got]


def message_record(value: bytes, priority: int | None = None, transient: bool = False) -> Record:
    headers: tuple = ()
    if priority is not None:
        headers += ((PRIORITY, str(priority).encode()),)
    if transient:
        headers += ((TRANSIENT, b"1"),)
    return Record(1_700_000_000_000, key=b"rk", value=value, headers=headers)


async def store(queue, records: list[Record]) -> None:
    await asyncio.gather(*[f for r in records for f in publish([queue], r)])


@pytest.fixture
async def space(core):
    service = QueueService(core)
    yield await service.namespace("public", "default")
    await service.close()


# --- priorities -----------------------------------------------------------------------------------

async def test_higher_priority_first_equal_ones_in_publish_order_above_max_as_max(space) -> None:
    queue = await space.declare_queue("prio", arguments={"x-max-priority": 5})
    plan = [(b"a", None), (b"b", 3), (b"c", 1), (b"d", 9), (b"e", 3), (b"f", 5), (b"g", 0), (b"h", 200)]
    await store(queue, [message_record(v, p) for v, p in plan])
    consumer = Recorder()
    await queue.add_consumer(consumer)
    await eventually(lambda: len(consumer.got) == len(plan))
    assert consumer.values() == [b"d", b"f", b"h", b"b", b"e", b"c", b"a", b"g"]


async def test_priority_is_strict_across_the_whole_backlog_not_a_read_ahead_window(space, monkeypatch) -> None:
    # Far more than one log read (1 MiB) and than the bodies kept in memory: the high ones come last.
    monkeypatch.setattr(priority_module, "BODY_MESSAGES", 64)
    queue = await space.declare_queue("deep", arguments={"x-max-priority": 3})
    filler = b"x" * 2048
    await store(queue, [message_record(filler + b"%d" % i, 0) for i in range(1500)])
    await store(queue, [message_record(b"high%d" % i, 3) for i in range(5)]
                + [message_record(b"mid%d" % i, 2) for i in range(3)])
    consumer = Recorder(prefetch=10)
    await queue.add_consumer(consumer)
    await eventually(lambda: len(consumer.got) == 10)
    assert consumer.values()[:8] == [b"high%d" % i for i in range(5)] + [b"mid%d" % i for i in range(3)]
    assert consumer.values()[8:] == [filler + b"0", filler + b"1"]
    queue.subscription.ack([m.offset for m in consumer.got])
    await eventually(lambda: len(consumer.got) == 20)
    assert consumer.values()[10:] == [filler + b"%d" % i for i in range(2, 12)]


async def test_basic_get_and_requeue_keep_priority_order(space) -> None:
    queue = await space.declare_queue("prio-get", arguments={"x-max-priority": 10})
    await store(queue, [message_record(b"low", 1), message_record(b"top", 10), message_record(b"mid", 5)])
    top = await queue.get("owner", auto_ack=False)
    assert top.value == b"top"
    queue.subscription.release("owner")        # back to its place: first again, redelivered
    again = await queue.get("owner", auto_ack=True)
    assert (again.value, again.redelivered) == (b"top", True)
    assert [(await queue.get("owner", auto_ack=True)).value for _ in range(2)] == [b"mid", b"low"]
    assert await queue.get("owner", auto_ack=True) is None


async def test_a_new_higher_priority_message_overtakes_the_waiting_ones(space) -> None:
    queue = await space.declare_queue("live", arguments={"x-max-priority": 2})
    await store(queue, [message_record(b"w%d" % i) for i in range(5)])
    consumer = Recorder(prefetch=1)
    await queue.add_consumer(consumer)
    await eventually(lambda: len(consumer.got) == 1)
    await store(queue, [message_record(b"urgent", 2)])
    await asyncio.sleep(0.05)
    queue.subscription.ack([consumer.got[0].offset])
    await eventually(lambda: len(consumer.got) == 2)
    assert consumer.values() == [b"w0", b"urgent"]


def test_read_ahead_loads_missing_bodies_and_drops_vanished_heads() -> None:
    lanes = PriorityReadAhead(2, body_messages=1)
    for offset, level in ((0, 0), (1, 2), (2, 1)):
        lanes.append(QueuedMessage(offset, 0, None, b"v%d" % offset, ((PRIORITY, b"%d" % level),)))
    assert len(lanes) == 3
    assert lanes.peek(lambda offset: False) is None and lanes.missing == 1    # body of offset 1 not kept
    lanes.missing = None
    assert lanes.peek(lambda offset: offset == 1) is None and lanes.missing == 2   # acked: skipped
    lanes.clear()
    assert len(lanes) == 0 and lanes.peek(lambda offset: False) is None


async def test_max_priority_argument_is_checked_as_rabbitmq_does(space) -> None:
    for value, reason in ((256, "{max_value_exceeded,256}"), (-1, "{value_negative,-1}"),
                          ("5", '"expected integer, got longstr"')):
        with pytest.raises(InvalidArgument, match=f"invalid arg 'x-max-priority' for queue 'p': {reason}"):
            await space.declare_queue("p", arguments={"x-max-priority": value})
    await space.declare_queue("p", arguments={"x-max-priority": 255})
    with pytest.raises(InequivalentDeclaration, match="x-max-priority"):
        await space.declare_queue("p", arguments={"x-max-priority": 10})
    with pytest.raises(InvalidArgument, match="x-single-active-consumer' for queue 's': {unacceptable_type,longstr}"):
        await space.declare_queue("s", arguments={"x-single-active-consumer": "yes"})


# --- single active consumer ---------------------------------------------------------------------

async def test_single_active_consumer_fails_over_in_order(space) -> None:
    queue = await space.declare_queue("sac", arguments={"x-single-active-consumer": True})
    first, second, third = Recorder(prefetch=3), Recorder(), Recorder()
    await queue.add_consumer(first)
    with pytest.raises(ExclusiveUse):                    # as on any queue (RabbitMQ 3.10 alike)
        await queue.add_consumer(Recorder(), exclusive=True)
    await queue.add_consumer(second)
    await queue.add_consumer(third)
    assert queue.consumer_count == 3
    await store(queue, [message_record(b"%d" % i) for i in range(6)])
    await eventually(lambda: len(first.got) == 3)
    await asyncio.sleep(0.05)
    assert second.got == [] and third.got == []           # the active one is full: nobody else gets any
    queue.subscription.ack([first.got[0].offset])
    queue.subscription.remove_consumer(first)             # gone: what it held goes to the next one first
    await eventually(lambda: len(second.got) == 5)
    assert second.values() == [b"1", b"2", b"3", b"4", b"5"]
    assert second.redelivered == [True, True, True, False, False]   # 3 went to first after its ack
    assert third.got == []


async def test_consumers_of_higher_priority_are_served_first_and_equals_take_turns(space) -> None:
    queue = await space.declare_queue("cprio")
    low, high_a, high_b = Recorder(prefetch=10), Recorder(prefetch=2), Recorder(prefetch=2)
    low.priority, high_a.priority, high_b.priority = -1, 3, 3
    for consumer in (low, high_a, high_b):
        await queue.add_consumer(consumer)
    await store(queue, [message_record(b"%d" % i) for i in range(7)])
    await eventually(lambda: len(low.got) == 3)
    assert (high_a.values(), high_b.values(), low.values()) == ([b"0", b"2"], [b"1", b"3"], [b"4", b"5", b"6"])
    queue.subscription.ack([m.offset for m in (*high_a.got, *high_b.got, *low.got)])
    await store(queue, [message_record(b"7")])
    await eventually(lambda: len(high_a.got) + len(high_b.got) == 5)
    assert len(low.got) == 3                      # room again on high: low gets nothing more
    queue.subscription.remove_consumer(high_a)
    queue.subscription.remove_consumer(high_b)
    await eventually(lambda: len(low.got) == 4)     # "7", given back by the high one that held it
    await store(queue, [message_record(b"8")])
    await eventually(lambda: len(low.got) == 5)


# --- restart --------------------------------------------------------------------------------------

@contextlib.asynccontextmanager
async def running(directory, *, crash: bool = False):
    """A core on `directory` and its default queue namespace; stopped cleanly on the way out, or
    with `crash` as a dying process leaves things (nothing more saved)."""
    storage = await EmbeddedStorage.open(directory / "data", StorageConfig())
    core = Core(storage.metadata, storage.logs, FakeClock())
    await core.start()
    service = QueueService(core)
    try:
        yield core, await service.namespace("public", "default")
        if not crash:
            await service.close()
    finally:
        await core.close()
        await storage.close()


async def test_restart_drops_transient_messages_and_marks_what_was_handed_out(tmp_path) -> None:
    async with running(tmp_path) as (_, space):
        queue = await space.declare_queue("durable-q")
        await store(queue, [message_record(b"p1"), message_record(b"t1", transient=True), message_record(b"p2"),
                            message_record(b"t2", transient=True), message_record(b"p3")])
        handed = await queue.get("owner", auto_ack=False)      # p1, never acknowledged
        assert handed.value == b"p1" and not handed.redelivered

    async with running(tmp_path) as (_, space):
        queue = space.queue("durable-q")
        await store(queue, [message_record(b"t3", transient=True)])     # this process's: kept
        assert await queue.message_count() == 4
        got = [await queue.get("o", auto_ack=True) for _ in range(4)]
        assert [(m.value, m.redelivered) for m in got] == [(b"p1", True), (b"p2", False), (b"p3", False),
                                                           (b"t3", False)]


async def test_a_message_that_expired_before_the_queue_was_read_again_never_goes_out(tmp_path) -> None:
    """A queue read afresh (after a restart, or by a broker taking it over) reads its backlog in one
    go when a consumer comes: what expired long before that read is not "delivered at once" (the
    grace a message gets when it is read and handed out in the turn it arrived) and is dropped."""
    async with running(tmp_path) as (core, space):
        queue = await space.declare_queue("ttl-q", arguments={"x-message-ttl": 2000})
        stamp = core.clock.now_ms()
        await store(queue, [Record(stamp, key=b"rk", value=b"stale"), Record(stamp, key=b"rk", value=b"stale too")])

    async with running(tmp_path) as (core, space):
        core.clock.advance(5000)                 # three seconds past their expiry
        queue = space.queue("ttl-q")
        consumer = Recorder()
        await queue.add_consumer(consumer)
        await eventually(lambda: queue.subscription.ready_count == 0)
        await store(queue, [Record(core.clock.now_ms(), key=b"rk", value=b"fresh")])
        await eventually(lambda: consumer.values() == [b"fresh"])


async def test_a_crash_right_after_a_hand_out_still_marks_it_redelivered(tmp_path) -> None:
    async with running(tmp_path, crash=True) as (_, space):
        queue = await space.declare_queue("crash-q")
        await store(queue, [message_record(b"m1"), message_record(b"m2")])
        handed = await queue.get("owner", auto_ack=False)      # m1, never acknowledged
        assert handed.value == b"m1" and not handed.redelivered
        queue.subscription.discard()      # the process dies: the flush that would note the hand-out never runs

    async with running(tmp_path) as (_, space):
        queue = space.queue("crash-q")
        await store(queue, [message_record(b"m3")])
        got = [await queue.get("o", auto_ack=True) for _ in range(3)]
        # m2 was next in line, inside the stored reservation: it may have been handed out as far as
        # the store can tell. m3 came after the crash: it cannot have been.
        assert [(m.value, m.redelivered) for m in got] == [(b"m1", True), (b"m2", True), (b"m3", False)]


async def test_a_delivery_count_and_its_limit_outlive_a_restart(tmp_path) -> None:
    """RabbitMQ keeps a quorum queue's delivery counts in its log: a poison message is dead-lettered
    once over x-delivery-limit however often the broker restarted in between."""
    arguments = {"x-queue-type": "quorum", "x-delivery-limit": 3}
    async with running(tmp_path) as (_, space):
        queue = await space.declare_queue("poison-q", durable=True, arguments=arguments)
        await store(queue, [message_record(b"poison"), message_record(b"fine")])
        for deliveries in range(3):
            handed = await queue.get("owner", auto_ack=False)
            assert (handed.value, handed.deliveries) == (b"poison", deliveries)
            queue.subscription.reject([handed.offset], requeue=True)

    async with running(tmp_path) as (_, space):
        queue = space.queue("poison-q")
        handed = await queue.get("owner", auto_ack=False)
        assert (handed.value, handed.deliveries) == (b"poison", 3)    # x-delivery-count 3, not 1
        queue.subscription.reject([handed.offset], requeue=True)       # a fourth return: over the limit
        assert (await queue.get("o", auto_ack=True)).value == b"fine"
        assert await queue.get("o", auto_ack=True) is None


async def test_a_parked_group_stays_parked_across_a_restart_until_released(tmp_path) -> None:
    """A key-shared queue's group parked by its poison message stays parked after a restart: its
    later messages wait for an operator as before (they must not overtake the dead one), the
    other groups flow."""
    def grouped(value: bytes, group: bytes) -> Record:
        return Record(1_700_000_000_000, key=b"rk", value=value, headers=((GROUP, group),))

    arguments = {"x-subscription-type": "key-shared", "x-delivery-limit": 0}
    async with running(tmp_path) as (_, space):
        queue = await space.declare_queue("groups-q", durable=True, arguments=arguments)
        await store(queue, [grouped(b"poison", b"g"), grouped(b"after", b"g")])
        handed = await queue.get("owner", auto_ack=False)
        queue.subscription.reject([handed.offset], requeue=True)      # over the limit: dead, g parked
        assert queue.subscription.parked_groups == {b"g": handed.offset}

    async with running(tmp_path) as (_, space):
        queue = space.queue("groups-q")
        await store(queue, [grouped(b"free", b"h")])
        consumer = Recorder()
        await queue.add_consumer(consumer)
        await eventually(lambda: consumer.values() == [b"free"])
        assert queue.subscription.parked_groups == {b"g": 0}
        assert queue.subscription.release_group(b"g")
        await eventually(lambda: consumer.values() == [b"free", b"after"])


async def test_every_hand_out_is_below_a_stored_reservation(space, monkeypatch) -> None:
    monkeypatch.setattr(subscription_module, "DELIVERY_RESERVATION", 4)
    queue = await space.declare_queue("reserved")
    await store(queue, [message_record(b"%d" % i) for i in range(30)])
    cursor = (await queue.open()).cursor
    seen: list[tuple[int, int]] = []

    class Checking(Recorder):
        def deliver(self, message: QueuedMessage) -> None:
            seen.append((message.offset, cursor.delivery_reserved))
            super().deliver(message)

    consumer = Checking()
    await queue.add_consumer(consumer)
    await eventually(lambda: len(consumer.got) == 30)
    assert consumer.values() == [b"%d" % i for i in range(30)]
    assert all(offset < reserved for offset, reserved in seen), seen
    assert (await type(cursor).load(space._core.metadata, FakeClock(), queue.topic, 0, "queue")).delivery_reserved >= 30


async def test_a_caught_up_queue_hears_of_appends_that_bypass_its_publisher(space, monkeypatch) -> None:
    """A queue's own publishes are handed out as they are appended; anything else appended to its
    topic (a Kafka producer, cross-protocol) must wake its reader through the partition."""
    monkeypatch.setattr(subscription_module, "DATA_WAIT_S", 600)     # no periodic look to fall back on
    queue = await space.declare_queue("bypass")
    consumer = Recorder()
    await queue.add_consumer(consumer)
    await store(queue, [message_record(b"own-1")])
    await eventually(lambda: consumer.values() == [b"own-1"])
    await asyncio.sleep(0.01)       # the reader is waiting for the next append
    partition = await queue.partition()
    await partition.append(build_batch([message_record(b"as-kafka")]))
    await eventually(lambda: consumer.values() == [b"own-1", b"as-kafka"])
    await store(queue, [message_record(b"own-2")])
    await eventually(lambda: consumer.values() == [b"own-1", b"as-kafka", b"own-2"])


# --- transactions' building blocks --------------------------------------------------------------

async def test_publish_batch_is_one_batch_and_save_position_waits_for_the_flush(space) -> None:
    queue = await space.declare_queue("tx")
    before = queue.publisher.batches_appended
    publish([queue], message_record(b"loose"))
    await queue.publisher.publish_batch([message_record(b"%d" % i) for i in range(50)])
    assert queue.publisher.batches_appended == before + 2
    assert await queue.message_count() == 51
    message = await queue.get("owner", auto_ack=False)
    subscription = queue.subscription
    subscription.ack([message.offset])
    await subscription.save_position()
    stored = await type(subscription.cursor).load(space._core.metadata, FakeClock(), queue.topic, 0, "queue")
    assert stored.committed_offset == 1 and stored.delivered_offset == 1

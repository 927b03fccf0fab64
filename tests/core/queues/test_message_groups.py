"""Key-shared queues (FIFO message groups) and the other subscription types.

The group backlog on its own (table-driven), then whole queues on a real core: groups spread over
consumers one message at a time, a given-back message first in its group, poison messages parking
or skipping, Kafka records grouped by key; and a property over random ack / nack / cancel
sequences: each group's acknowledged deliveries come in publish order, nothing is acknowledged
twice, nothing is lost.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from core.clock import FakeClock
from core.errors import ExclusiveUse, InequivalentDeclaration, InvalidArgument
from core.queues.attributes import EXCHANGE, GROUP
from core.queues.groups import SKIP, GroupBacklog, group_of
from core.queues.policy import EXCLUSIVE, FAILOVER, KEY_SHARED, SHARED, QueuePolicy
from core.queues.service import QueueService, publish
from core.queues.subscription import QueuedMessage
from core.records.builder import Record
from core.service import Core
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage
from tests.polling import eventually

KEY_SHARED_ARGS = {"x-subscription-type": "key-shared"}


# --- the group of a message -----------------------------------------------------------------------

@pytest.mark.parametrize("key, headers, group", [
    (b"order-1", (), b"order-1"),                                         # a Kafka record: its key
    (None, (), None),                                                     # no key: no group
    (b"rk", ((EXCHANGE, b"ex"),), None),                                  # AMQP publish, no group id
    (b"rk", ((EXCHANGE, b"ex"), (GROUP, b"g7")), b"g7"),                  # AMQP publish with a group id
    (b"order-1", ((GROUP, b"g7"),), b"g7"),                               # the header wins over the key
])
def test_group_of_a_message(key, headers, group) -> None:
    assert group_of(QueuedMessage(0, 0, key, b"v", headers)) == group


# --- the group backlog on its own -----------------------------------------------------------------

def grouped(offset: int, group: bytes | None) -> QueuedMessage:
    return QueuedMessage(offset, 0, group, b"x", ())


def run(backlog: GroupBacklog, script: str, messages: dict[int, QueuedMessage]) -> list[int]:
    """Steps: "t" take the head, "s<o>" settle offset o, "b<o>" put o back, "p<o>" o poisoned
    (then settled), "r<g>" release group g. Returns the offsets taken."""
    taken = []
    for step in script.split():
        op, arg = step[0], step[1:]
        if op == "t":
            head = backlog.peek(lambda offset: False)
            if head is None:
                taken.append(None)
                continue
            backlog.take()
            taken.append(head.offset)
        elif op == "s":
            backlog.settled(int(arg))
        elif op == "b":
            backlog.put_back(messages[int(arg)])
        elif op == "p":
            backlog.poisoned(int(arg))
            backlog.settled(int(arg))
        elif op == "r":
            backlog.release(arg.encode())
    return taken


LOG = [(0, b"a"), (1, b"a"), (2, b"b"), (3, None), (4, b"a"), (5, b"b")]


@pytest.mark.parametrize("script, policy, expected", [
    # one outstanding per group: a's second waits, b and the ungrouped one flow
    ("t t t t", "block", [0, 2, 3, None]),
    # settling a lets its next one go, in log order among what is ready
    ("t t t s0 t t", "block", [0, 2, 3, 1, None]),
    # given back: the same message again, before the rest of its group
    ("t t b0 t t", "block", [0, 2, 0, 3]),
    ("t b0 t s0 t s1 t", "block", [0, 0, 1, 2]),
    # a poison message parks its group (block) until released; others keep going
    ("t t p0 t t s2 t ra t", "block", [0, 2, 3, None, 5, 1]),
    ("t t p0 t t", "skip", [0, 2, 1, 3]),
])
def test_group_backlog_hands_out_one_message_per_group_in_order(script, policy, expected) -> None:
    messages = {offset: grouped(offset, group) for offset, group in LOG}
    backlog = GroupBacklog(policy)
    backlog.extend(list(messages.values()))
    assert run(backlog, script, messages) == expected


def test_group_backlog_drops_settled_heads_and_counts_what_waits() -> None:
    backlog = GroupBacklog()
    backlog.extend([grouped(o, g) for o, g in LOG])
    assert len(backlog) == 6
    acked = {0, 2}
    head = backlog.peek(lambda offset: offset in acked)
    assert head.offset == 1                      # 0 is acknowledged already: a moves on to 1
    backlog.clear()
    assert backlog.peek(lambda offset: False) is None and len(backlog) == 0


# --- queues on a real core ------------------------------------------------------------------------

class Recorder:
    def __init__(self, prefetch: int = 0, auto_ack: bool = False, log: list | None = None) -> None:
        self.prefetch = prefetch
        self.auto_ack = auto_ack
        self.got: list[QueuedMessage] = []
        self.held: list[int] = []
        self.log = log if log is not None else []       # deliveries to every consumer sharing it, in order

    def can_deliver(self) -> bool:
        return True

    def deliver(self, message: QueuedMessage) -> None:
        self.got.append(message)
        self.log.append(message.value)
        if not self.auto_ack:
            self.held.append(message.offset)

    def queue_deleted(self) -> None:
        pass

    def values(self) -> list[bytes]:
        return [m.value for m in self.got]


def amqp_record(value: bytes, group: bytes | None) -> Record:
    headers = ((EXCHANGE, b""),) + (((GROUP, group),) if group is not None else ())
    return Record(1_700_000_000_000, key=b"rk", value=value, headers=headers)


async def store(queue, records: list[Record]) -> None:
    await asyncio.gather(*[f for r in records for f in publish([queue], r)])


@pytest.fixture
async def space(core):
    service = QueueService(core)
    yield await service.namespace("public", "default")
    await service.close()


async def open_with(space, name: str, records: list[Record], arguments=None):
    queue = await space.declare_queue(name, arguments=arguments or KEY_SHARED_ARGS)
    await store(queue, records)
    return queue, await queue.open()


async def test_groups_spread_over_consumers_one_message_at_a_time(space) -> None:
    records = [amqp_record(f"{g}{i}".encode(), g.encode()) for i in range(3) for g in "ab"]
    queue, subscription = await open_with(space, "ks-spread", records)
    order: list[bytes] = []
    first, second = Recorder(prefetch=10, log=order), Recorder(prefetch=10, log=order)
    await queue.add_consumer(first)
    await queue.add_consumer(second)
    await eventually(lambda: len(order) == 2)
    # a0 to one consumer, b0 to the other (each had room for more); nothing else until one is settled
    assert sorted([first.values(), second.values()]) == [[b"a0"], [b"b0"]]
    while first.held or second.held:
        for consumer in (first, second):
            if consumer.held:
                subscription.ack([consumer.held.pop()])
                assert len(first.held) + len(second.held) <= 2
    for g in (b"a", b"b"):
        assert [v for v in order if v.startswith(g)] == [g + b"0", g + b"1", g + b"2"]


async def test_a_requeued_message_comes_again_before_the_rest_of_its_group(space) -> None:
    records = [amqp_record(v, b"g") for v in (b"m1", b"m2", b"m3")] + [amqp_record(b"x", b"other")]
    queue, subscription = await open_with(space, "ks-requeue", records)
    consumer = Recorder(prefetch=10)
    await queue.add_consumer(consumer)
    await eventually(lambda: len(consumer.got) == 2)
    assert consumer.values() == [b"m1", b"x"]
    subscription.reject([consumer.held[0]], requeue=True)
    assert consumer.values() == [b"m1", b"x", b"m1"] and consumer.got[-1].redelivered
    subscription.ack([consumer.got[-1].offset])
    assert consumer.values()[-1] == b"m2"


async def test_a_consumer_leaving_releases_its_groups_at_once(space) -> None:
    records = [amqp_record(v, b"g") for v in (b"m1", b"m2")]
    queue, subscription = await open_with(space, "ks-leave", records)
    leaving, staying = Recorder(prefetch=10), Recorder(prefetch=10)
    await queue.add_consumer(leaving)
    await eventually(lambda: len(leaving.got) == 1)
    await queue.add_consumer(staying)
    assert staying.got == []                    # the group is with `leaving`
    subscription.remove_consumer(leaving)
    assert staying.values() == [b"m1"] and staying.got[0].redelivered
    subscription.ack([staying.got[0].offset])
    assert staying.values() == [b"m1", b"m2"]


async def test_a_poison_message_parks_its_group_until_released(space) -> None:
    records = [amqp_record(v, b"g") for v in (b"p", b"after")] + [amqp_record(b"free", b"h")]
    queue, subscription = await open_with(space, "ks-block", records,
                                          {**KEY_SHARED_ARGS, "x-delivery-limit": 1})
    consumer = Recorder(prefetch=10)
    await queue.add_consumer(consumer)
    await eventually(lambda: len(consumer.got) == 2)
    for _ in range(2):
        subscription.reject([consumer.got[0].offset], requeue=True)
    assert consumer.values() == [b"p", b"free", b"p"]       # handed out twice, then dead: g parked
    assert subscription.parked_groups == {b"g": consumer.got[0].offset}
    subscription.ack([consumer.got[1].offset])
    assert consumer.values() == [b"p", b"free", b"p"]
    assert subscription.release_group(b"g") and not subscription.release_group(b"g")
    assert consumer.values()[-1] == b"after"


async def test_skip_policy_moves_the_group_on_past_a_poison_message(space) -> None:
    records = [amqp_record(v, b"g") for v in (b"p", b"after")]
    queue, subscription = await open_with(space, "ks-skip", records, {
        **KEY_SHARED_ARGS, "x-delivery-limit": 0, "x-group-poison-policy": SKIP})
    consumer = Recorder(prefetch=10)
    await queue.add_consumer(consumer)
    await eventually(lambda: len(consumer.got) == 1)
    subscription.reject([consumer.got[0].offset], requeue=True)
    assert consumer.values() == [b"p", b"after"] and subscription.parked_groups == {}


async def test_kafka_records_are_grouped_by_key(space) -> None:
    records = [Record(0, key=k, value=v) for k, v in ((b"k1", b"a"), (b"k1", b"b"), (b"k2", b"c"))]
    queue, subscription = await open_with(space, "ks-kafka", records)
    consumer = Recorder(prefetch=10)
    await queue.add_consumer(consumer)
    await eventually(lambda: len(consumer.got) == 2)
    assert consumer.values() == [b"a", b"c"]
    subscription.ack([consumer.got[0].offset])
    assert consumer.values() == [b"a", b"c", b"b"]


async def test_exclusive_subscription_type_refuses_a_second_consumer(space) -> None:
    queue = await space.declare_queue("excl", arguments={"x-subscription-type": "exclusive"})
    first = Recorder()
    await queue.add_consumer(first)
    with pytest.raises(ExclusiveUse):
        await queue.add_consumer(Recorder())
    queue.subscription.remove_consumer(first)
    await queue.add_consumer(Recorder())


@pytest.mark.parametrize("arguments, expected", [
    ({}, SHARED),
    ({"x-single-active-consumer": True}, FAILOVER),
    ({"x-subscription-type": "failover", "x-single-active-consumer": True}, FAILOVER),
    ({"x-subscription-type": "exclusive"}, EXCLUSIVE),
    ({"x-subscription-type": b"key-shared", "x-delivery-limit": 5}, KEY_SHARED),   # classic takes the limit
])
def test_subscription_type_argument(arguments, expected) -> None:
    assert QueuePolicy.of("q", arguments).subscription_type == expected


@pytest.mark.parametrize("arguments", [
    {"x-subscription-type": "round-robin"},
    {"x-subscription-type": "shared", "x-single-active-consumer": True},
    {"x-group-poison-policy": "skip"},                                 # not key-shared
    {**KEY_SHARED_ARGS, "x-group-poison-policy": "retry"},
    {**KEY_SHARED_ARGS, "x-max-priority": 5},
    {"x-delivery-limit": 5},                                           # plain classic: as RabbitMQ
])
def test_invalid_subscription_arguments_are_refused(arguments) -> None:
    with pytest.raises(InvalidArgument):
        QueuePolicy.of("q", arguments)


async def test_redeclaring_with_another_subscription_type_is_inequivalent(space) -> None:
    await space.declare_queue("ks-redeclare", arguments=KEY_SHARED_ARGS)
    with pytest.raises(InequivalentDeclaration):
        await space.declare_queue("ks-redeclare", arguments={"x-subscription-type": "shared"})


# --- the property ---------------------------------------------------------------------------------

GROUPS = [b"a", b"b", b"c", None]
operations = st.lists(st.one_of(
    st.tuples(st.sampled_from(["ack", "nack", "drop"]), st.integers(0, 3), st.integers(0, 9)),
    st.tuples(st.just("leave"), st.integers(0, 3), st.just(0)),
    st.tuples(st.just("join"), st.integers(1, 4), st.just(0)),
), max_size=40)


async def scenario(directory: Path, groups: list[bytes | None], ops: list[tuple], skip: bool) -> None:
    storage = await EmbeddedStorage.open(directory, StorageConfig())
    core = Core(storage.metadata, storage.logs, FakeClock())
    await core.start()
    service = QueueService(core)
    try:
        space = await service.namespace("public", "default")
        arguments = {**KEY_SHARED_ARGS, "x-delivery-limit": 2,
                     "x-group-poison-policy": SKIP if skip else "block"}
        records = [amqp_record(str(i).encode(), g) for i, g in enumerate(groups)]
        queue, subscription = await open_with(space, "prop", records, arguments)
        offsets = {}                                   # offset -> (group, publish index)
        outstanding: dict[bytes, int] = {}             # group -> its delivered, unsettled offset
        settled: dict[int, str] = {}                   # offset -> "acked" / "dead"
        acked_in_order: dict[bytes | None, list[int]] = {}
        consumers: list[Recorder] = []

        class Checked(Recorder):
            def deliver(self, message: QueuedMessage) -> None:
                group = group_of(message)
                assert message.offset not in settled, "a settled message was handed out again"
                if group is not None:
                    assert group not in outstanding, "two messages of one group outstanding"
                    outstanding[group] = message.offset
                offsets[message.offset] = group
                super().deliver(message)

        def done(offset: int, how: str) -> None:
            group = offsets[offset]
            if outstanding.get(group) == offset:
                del outstanding[group]
            if how == "acked":
                assert offset not in settled, "acknowledged twice"
                settled[offset] = how
                acked_in_order.setdefault(group, []).append(offset)

        async def join(prefetch: int) -> None:
            consumer = Checked(prefetch=prefetch)
            consumers.append(consumer)
            await queue.add_consumer(consumer)

        def returned(consumer: Recorder) -> None:
            for offset in consumer.held:
                done(offset, "returned")
            consumer.held.clear()

        await join(2)
        await eventually(lambda: consumers[0].got)
        for op, who, which in ops:
            if op == "join":
                await join(who)
                continue
            live = [c for c in consumers if c in subscription.consumers]
            if not live:
                continue
            consumer = live[who % len(live)]
            if op == "leave":
                returned(consumer)
                subscription.remove_consumer(consumer)
                continue
            if not consumer.held:
                continue
            offset = consumer.held.pop(which % len(consumer.held))
            if op == "ack":
                done(offset, "acked")
                subscription.ack([offset])
            else:
                done(offset, "returned")
                subscription.reject([offset], requeue=op == "nack")
        # drain: one consumer acknowledges everything; block-parked groups are released
        for consumer in [c for c in consumers if c in subscription.consumers]:
            returned(consumer)
            subscription.remove_consumer(consumer)
        await join(0)
        drainer = consumers[-1]
        while True:
            if drainer.held:
                offset = drainer.held.pop(0)
                done(offset, "acked")
                subscription.ack([offset])
            elif subscription.parked_groups:
                for group in subscription.parked_groups:
                    subscription.release_group(group)
            else:
                break
        # every message is acknowledged or dead (dropped at the delivery limit), never both
        published = await queue.partition()
        for offset in range(published.high_watermark):
            assert subscription.cursor.is_acked(offset), f"message {offset} lost"
        for group, acked in acked_in_order.items():
            if group is not None:
                assert acked == sorted(acked), f"group {group!r} acknowledged out of order: {acked}"
    finally:
        await service.close()
        await core.close()
        await storage.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(GROUPS), min_size=1, max_size=12), operations, st.booleans())
def test_random_ack_nack_cancel_keep_every_group_in_order_and_lose_nothing(groups, ops, skip) -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(scenario(Path(directory) / "data", groups, ops, skip))

"""Queues in the core: declaring, publishing (coalesced), dispatching with prefetch, acks, requeues,
gets, purges, deletes and what survives a restart."""

from __future__ import annotations

import asyncio

import pytest

from core.clock import FakeClock
from core.errors import (ExclusiveUse, InequivalentDeclaration, InvalidArgument, NotPermitted, ReservedName,
                         ResourceInUse, ResourceLocked, UnknownExchange, UnknownQueue)
from core.queues.exchange import Binding, DestinationKind, ExchangeType
from core.queues.naming import name_of, queue_topic, storage_key
from core.queues.service import QueueService, publish
from core.queues import subscription as subscription_module
from core.queues.subscription import QueuedMessage
from core.records.builder import Record, build_batch
from core.service import Core
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage
from tests.polling import eventually

Q = DestinationKind.QUEUE


class Recorder:
    """A consumer that keeps what it was given."""

    def __init__(self, prefetch: int = 0, auto_ack: bool = False) -> None:
        self.prefetch = prefetch
        self.auto_ack = auto_ack
        self.open = True
        self.got: list[QueuedMessage] = []
        self.redelivered: list[bool] = []
        self.cancelled = False

    def can_deliver(self) -> bool:
        return self.open

    def deliver(self, message: QueuedMessage) -> None:
        self.got.append(message)
        self.redelivered.append(message.redelivered)

    def queue_deleted(self) -> None:
        self.cancelled = True

    def values(self) -> list[bytes]:
        return [m.value for m in self.got]


def record(value: bytes) -> Record:
    return Record(1_700_000_000_000, key=b"rk", value=value, headers=(("h", b"v"),))


async def publish_all(space, queue_name: str, values: list[bytes]) -> None:
    futures = [f for v in values for f in publish([space.queue(queue_name)], record(v))]
    await asyncio.gather(*futures)


@pytest.fixture
async def space(core):
    service = QueueService(core)
    yield await service.namespace("public", "default")
    await service.close()


def test_storage_keys_and_topics_of_names() -> None:
    for name in ("orders", "a.b", "amq.gen-x", "ünï/code", "with space"):
        assert name_of(storage_key(name)) == name
    assert storage_key("a.b") == "a.2eb"
    assert queue_topic("orders") == "orders"
    assert queue_topic("with space").startswith("queue-")


async def test_publishes_in_one_loop_turn_are_stored_as_one_batch(space) -> None:
    queue = await space.declare_queue("jobs")
    futures = [f for i in range(500) for f in publish([queue], record(b"m%d" % i))]
    await asyncio.gather(*futures)
    assert queue.publisher.batches_appended == 1
    assert await queue.message_count() == 500


async def test_consumer_gets_messages_in_order_and_acks_move_the_cursor(space) -> None:
    queue = await space.declare_queue("jobs")
    await publish_all(space, "jobs", [b"a", b"b", b"c"])
    consumer = Recorder()
    await queue.add_consumer(consumer)
    await eventually(lambda: len(consumer.got) == 3)
    assert consumer.values() == [b"a", b"b", b"c"] and consumer.redelivered == [False] * 3
    assert consumer.got[0].key == b"rk" and consumer.got[0].headers == (("h", b"v"),)
    queue.subscription.ack([consumer.got[1].offset])
    assert queue.subscription.cursor.committed_offset == 0
    queue.subscription.ack([consumer.got[0].offset])
    assert queue.subscription.cursor.committed_offset == 2
    assert await queue.message_count() == 0 and queue.subscription.unacked_count == 1


class Flushing(Recorder):
    """A consumer that buffers its output, as an AMQP channel does."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed_after: list[int] = []     # how many it had been given at each flush

    def flush(self) -> None:
        self.flushed_after.append(len(self.got))


async def test_a_consumer_that_buffers_is_flushed_once_after_each_dispatch(space) -> None:
    queue = await space.declare_queue("jobs")
    await publish_all(space, "jobs", [b"a", b"b", b"c"])
    consumer = Flushing()
    await queue.add_consumer(consumer)
    await eventually(lambda: len(consumer.got) == 3)
    assert consumer.flushed_after == [3]        # the three of one read: one flush after the last
    await publish_all(space, "jobs", [b"d"])
    await eventually(lambda: consumer.flushed_after[-1:] == [4])


async def test_acks_between_two_cursor_writes_are_saved_together(space, monkeypatch) -> None:
    monkeypatch.setattr(subscription_module, "CURSOR_FLUSH_INTERVAL_S", 3600.0)
    queue = await space.declare_queue("jobs")
    await publish_all(space, "jobs", [b"%d" % i for i in range(20)])
    consumer = Recorder()
    await queue.add_consumer(consumer)
    await eventually(lambda: len(consumer.got) == 20)
    subscription = queue.subscription
    writes: list[int] = []
    flush = subscription.cursor.flush

    async def counted_flush() -> None:
        writes.append(subscription.cursor.committed_offset)
        await flush()
    monkeypatch.setattr(subscription.cursor, "flush", counted_flush)
    for message in consumer.got:
        subscription.ack([message.offset])
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)
    assert len(writes) <= 1        # the first ack's write, or none if the delivery's just went
    # Someone waiting for the position does not wait out the interval.
    await asyncio.wait_for(subscription.save_position(), 5)
    assert writes[-1] == 20


async def test_prefetch_bounds_unacked_deliveries_per_consumer(space) -> None:
    queue = await space.declare_queue("jobs")
    await publish_all(space, "jobs", [b"%d" % i for i in range(10)])
    consumer = Recorder(prefetch=3)
    await queue.add_consumer(consumer)
    await eventually(lambda: len(consumer.got) == 3)
    await asyncio.sleep(0.05)
    assert len(consumer.got) == 3
    queue.subscription.ack([m.offset for m in consumer.got[:2]])
    assert len(consumer.got) == 5


async def test_messages_are_spread_round_robin_over_consumers(space) -> None:
    queue = await space.declare_queue("jobs")
    first, second = Recorder(prefetch=100), Recorder(prefetch=100)
    await queue.add_consumer(first)
    await queue.add_consumer(second)
    await publish_all(space, "jobs", [b"%d" % i for i in range(10)])
    await eventually(lambda: len(first.got) + len(second.got) == 10)
    assert len(first.got) == len(second.got) == 5


async def test_requeued_and_orphaned_messages_come_back_first_marked_redelivered(space) -> None:
    queue = await space.declare_queue("jobs")
    await publish_all(space, "jobs", [b"a", b"b", b"c", b"d"])
    leaving = Recorder(prefetch=2)
    await queue.add_consumer(leaving)
    await eventually(lambda: len(leaving.got) == 2)
    queue.subscription.reject([leaving.got[1].offset], requeue=True)    # b back, then handed out again
    await eventually(lambda: len(leaving.got) == 3)
    assert leaving.values() == [b"a", b"b", b"b"] and leaving.redelivered == [False, False, True]
    queue.subscription.remove_consumer(leaving)     # a and b go back
    staying = Recorder()
    await queue.add_consumer(staying)
    await eventually(lambda: len(staying.got) == 4)
    assert staying.values() == [b"a", b"b", b"c", b"d"]
    assert staying.redelivered == [True, True, False, False]


async def test_reject_without_requeue_drops_the_message(space) -> None:
    queue = await space.declare_queue("jobs")
    await publish_all(space, "jobs", [b"a"])
    consumer = Recorder()
    await queue.add_consumer(consumer)
    await eventually(lambda: len(consumer.got) == 1)
    queue.subscription.reject([consumer.got[0].offset], requeue=False)
    assert queue.subscription.cursor.committed_offset == 1 and await queue.message_count() == 0


async def test_auto_ack_consumers_acknowledge_on_delivery(space) -> None:
    queue = await space.declare_queue("jobs")
    await publish_all(space, "jobs", [b"a", b"b"])
    consumer = Recorder(auto_ack=True)
    await queue.add_consumer(consumer)
    await eventually(lambda: len(consumer.got) == 2)
    assert queue.subscription.unacked_count == 0 and queue.subscription.cursor.committed_offset == 2


async def test_a_paused_consumer_gets_nothing_until_woken(space) -> None:
    queue = await space.declare_queue("jobs")
    consumer = Recorder()
    consumer.open = False
    await queue.add_consumer(consumer)
    await publish_all(space, "jobs", [b"a"])
    await asyncio.sleep(0.05)
    assert consumer.got == []
    consumer.open = True
    queue.subscription.wake()
    assert consumer.values() == [b"a"]


async def test_get_takes_one_message_and_release_returns_it(space) -> None:
    queue = await space.declare_queue("jobs")
    assert await queue.get("owner", auto_ack=False) is None
    await publish_all(space, "jobs", [b"a", b"b"])
    first = await queue.get("owner", auto_ack=False)
    assert first.value == b"a" and not first.redelivered and await queue.message_count() == 1
    queue.subscription.release("owner")
    again = await queue.get("other", auto_ack=True)
    assert again.value == b"a" and again.redelivered
    assert (await queue.get("other", auto_ack=True)).value == b"b"
    assert await queue.get("other", auto_ack=True) is None


async def test_exclusive_consumer_refuses_company(space) -> None:
    queue = await space.declare_queue("jobs")
    await queue.add_consumer(Recorder(), exclusive=True)
    with pytest.raises(ExclusiveUse, match="exclusive use"):
        await queue.add_consumer(Recorder())


async def test_purge_drops_ready_messages_but_not_unacked_ones(space) -> None:
    queue = await space.declare_queue("jobs")
    await publish_all(space, "jobs", [b"a", b"b", b"c"])
    held = await queue.get("owner", auto_ack=False)
    assert await queue.purge() == 2
    assert await queue.message_count() == 0
    queue.subscription.release("owner")
    assert (await queue.get("owner", auto_ack=True)).value == held.value
    await publish_all(space, "jobs", [b"d"])
    assert (await queue.get("owner", auto_ack=True)).value == b"d"


async def test_declare_checks_equivalence_reserved_names_and_arguments(space) -> None:
    await space.declare_queue("q", durable=True)
    with pytest.raises(InequivalentDeclaration, match="inequivalent arg 'durable' for queue 'q'"):
        await space.declare_queue("q", durable=False)
    with pytest.raises(UnknownQueue, match="no queue 'missing'"):
        await space.declare_queue("missing", passive=True)
    with pytest.raises(ReservedName, match="reserved prefix"):
        await space.declare_queue("amq.mine")
    assert (await space.declare_queue("amq.gen-abc", server_named=True)).name == "amq.gen-abc"
    with pytest.raises(InvalidArgument, match="invalid arg 'x-message-ttl' for queue 'ttl': {value_negative,-1}"):
        await space.declare_queue("ttl", arguments={"x-message-ttl": -1})
    with pytest.raises(InvalidArgument, match="invalid property 'non-durable' for queue 'qq'"):
        await space.declare_queue("qq", durable=False, arguments={"x-queue-type": "quorum"})
    assert await space.declare_queue("classic", arguments={"x-queue-type": "classic", "x-custom": 1})


async def test_exclusive_queues_belong_to_their_owner_and_go_with_it(space) -> None:
    owner, stranger = object(), object()
    await space.declare_queue("mine", exclusive=True, owner=owner)
    with pytest.raises(ResourceLocked, match="exclusive access"):
        await space.declare_queue("mine", exclusive=True, owner=stranger)
    with pytest.raises(ResourceLocked, match="exclusive property value does not match"):
        await space.declare_queue("mine", exclusive=False, owner=owner)
    with pytest.raises(ResourceLocked):
        space.queue("mine", stranger)
    await space.release_owner(owner)
    assert "mine" not in space.queues


async def test_delete_if_unused_if_empty_and_consumer_notification(space) -> None:
    queue = await space.declare_queue("q")
    consumer = Recorder()
    await queue.add_consumer(consumer)
    with pytest.raises(ResourceInUse, match="in use"):
        await space.delete_queue("q", if_unused=True)
    queue.subscription.remove_consumer(consumer)
    await publish_all(space, "q", [b"a"])
    with pytest.raises(ResourceInUse, match="not empty"):
        await space.delete_queue("q", if_empty=True)
    await queue.add_consumer(consumer)
    await eventually(lambda: len(consumer.got) == 1)
    queue.subscription.ack([consumer.got[0].offset])
    assert await space.delete_queue("q") == 0
    assert consumer.cancelled and "q" not in space.queues
    assert await space.delete_queue("q") == 0, "deleting a missing queue is not an error"


async def test_auto_delete_queue_goes_with_its_last_consumer(space) -> None:
    queue = await space.declare_queue("temp", auto_delete=True)
    consumer = Recorder()
    await queue.add_consumer(consumer)
    queue.subscription.remove_consumer(consumer)
    await space.consumer_removed(queue)
    assert "temp" not in space.queues


async def test_exchanges_bindings_and_routing_through_the_service(space) -> None:
    await space.declare_exchange("logs", ExchangeType.TOPIC)
    with pytest.raises(InequivalentDeclaration, match="inequivalent arg 'type'"):
        await space.declare_exchange("logs", ExchangeType.FANOUT)
    with pytest.raises(ReservedName):
        await space.declare_exchange("amq.custom", ExchangeType.DIRECT)
    with pytest.raises(NotPermitted, match="default exchange"):
        await space.declare_exchange("", ExchangeType.DIRECT)
    await space.declare_queue("errors")
    await space.bind(Binding("logs", "errors", Q, "*.error"))
    assert [q.name for q in space.route("logs", "app.error", dict)] == ["errors"]
    assert [q.name for q in space.route("amq.direct", "x", dict)] == []
    assert [q.name for q in space.route("", "errors", dict)] == ["errors"]
    with pytest.raises(UnknownExchange):
        space.route("nope", "x", dict)
    with pytest.raises(ResourceInUse):
        await space.delete_exchange("logs", if_unused=True)
    with pytest.raises(UnknownQueue):
        await space.bind(Binding("logs", "missing", Q, "k"))
    with pytest.raises(InvalidArgument):
        await space.bind(Binding("amq.headers", "errors", Q, "", {"x-match": "some"}))
    await space.delete_queue("errors")
    assert space.routing.bindings_from("logs") == []


async def test_internal_exchanges_refuse_publishes(space) -> None:
    await space.declare_exchange("inner", ExchangeType.FANOUT, internal=True)
    with pytest.raises(NotPermitted, match="internal"):
        space.route("inner", "", dict)


async def test_auto_delete_exchange_goes_with_its_last_binding(space) -> None:
    await space.declare_exchange("ephemeral", ExchangeType.FANOUT, auto_delete=True)
    await space.declare_queue("q")
    binding = Binding("ephemeral", "q", Q)
    await space.bind(binding)
    await space.unbind(binding)
    assert "ephemeral" not in space.routing.exchanges


async def test_durable_things_survive_a_restart_and_transient_ones_do_not(tmp_path) -> None:
    async def open_core():
        storage = await EmbeddedStorage.open(tmp_path / "data", StorageConfig())
        core = Core(storage.metadata, storage.logs, FakeClock())
        await core.start()
        return storage, core

    storage, core = await open_core()
    service = QueueService(core)
    space = await service.namespace("public", "default")
    await space.declare_exchange("events", ExchangeType.DIRECT)
    await space.declare_exchange("scratch", ExchangeType.DIRECT, durable=False)
    await space.declare_queue("kept")
    await space.declare_queue("transient", durable=False)
    await space.declare_queue("private", exclusive=True, owner=object())
    await space.bind(Binding("events", "kept", Q, "k"))
    await space.bind(Binding("events", "transient", Q, "k"))
    await publish_all(space, "kept", [b"a", b"b", b"c"])
    first = await space.queue("kept").get("owner", auto_ack=False)
    space.queue("kept").subscription.ack([first.offset])
    await service.close()
    await core.close()
    await storage.close()

    storage, core = await open_core()
    try:
        space = await QueueService(core).namespace("public", "default")
        assert set(space.queues) == {"kept"}
        assert "events" in space.routing.exchanges and "scratch" not in space.routing.exchanges
        assert [b.destination for b in space.routing.bindings_from("events")] == ["kept"]
        kept = space.queue("kept")
        assert await kept.message_count() == 2
        assert [(await kept.get("o", auto_ack=True)).value for _ in range(2)] == [b"b", b"c"]
        assert "transient" not in await core.registry.list_topics("public", "default")
    finally:
        await core.close()
        await storage.close()


async def test_a_queue_over_an_existing_topic_starts_at_its_end_and_leaves_it_behind(core, space) -> None:
    from core.names import TopicName
    topic = TopicName.of("from-kafka")
    await core.create_topic(topic, 1)
    partition = await core.partition(topic, 0)
    await partition.append(build_batch([record(b"old")]))
    queue = await space.declare_queue("from-kafka")
    assert await queue.message_count() == 0, "a new queue is empty"
    await publish_all(space, "from-kafka", [b"new"])
    assert (await queue.get("o", auto_ack=True)).value == b"new"
    await space.delete_queue("from-kafka")
    assert "from-kafka" in await core.registry.list_topics("public", "default")
    await core.create_topic(TopicName.of("wide"), 3)
    with pytest.raises(InequivalentDeclaration, match="3 partitions"):
        await space.declare_queue("wide")

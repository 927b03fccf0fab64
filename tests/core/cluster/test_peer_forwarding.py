"""A client of one broker uses a queue another broker serves: the declare, the message count and
the publishes go over the peer link to the owner (core/queues/forwarding.py), in order, each
publish done once durable there; a full reject-publish queue refuses exactly the messages over its
limit. Two brokers on one embedded store, in one process, each with its peer link listening."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from core.cluster.bundles import partition_bundle
from core.cluster.peers import PeerService
from core.delayed.service import partition_target
from core.delayed.store import SYSTEM_TOPIC as DELAYED_TOPIC
from core.errors import ResourceLocked
from core.queues.exchange import Binding, DestinationKind, ExchangeType
from core.queues.limits import PublishRefused
from core.queues.naming import queue_topic
from core.records.builder import Record
from tests.core.cluster.test_cluster_membership import until
from tests.core.cluster.test_queue_topology import served_by

async def test_a_queue_of_the_other_broker_is_declared_counted_and_published_to_through_this_one(brokers) -> None:
    members, services = brokers
    here = await services[0].namespace("public", "default")
    there = await services[1].namespace("public", "default")
    name = served_by(members[1], "orders")
    queue = await here.declare_queue(name, arguments={"x-max-length": 3, "x-overflow": "reject-publish"})
    assert not queue.served_here and name in there.queues          # declared at its owner

    outcomes = await asyncio.gather(*(queue.publish(Record(0, value=b"%d" % i)) for i in range(5)),
                                    return_exceptions=True)
    assert outcomes[:3] == [None] * 3
    assert all(isinstance(outcome, PublishRefused) for outcome in outcomes[3:])
    assert await queue.message_count() == 3                         # as the owner counts them
    got = [await there.queues[name].get("client", auto_ack=True) for _ in range(3)]
    assert [m.value for m in got] == [b"0", b"1", b"2"]             # in publish order

    again = await here.declare_queue(name, arguments={"x-max-length": 3, "x-overflow": "reject-publish"})
    assert again is queue and await again.message_count() == 0


async def test_a_peer_with_the_wrong_secret_is_not_answered(brokers) -> None:
    members, _ = brokers
    stranger = PeerService(b"not-the-secret")
    try:
        with pytest.raises(Exception, match="cannot link|lost"):
            await stranger.ask(members[1].local, {"kind": "queue-counts", "tenant": "public",
                                                  "namespace": "default", "queue": "x"})
    finally:
        await stranger.close()


async def test_a_reply_published_through_the_other_broker_reaches_an_exclusive_reply_queue(brokers) -> None:
    members, services = brokers
    here = await services[0].namespace("public", "default")
    there = await services[1].namespace("public", "default")
    connection = object()
    name = here.local_name(lambda: f"amq.gen-{__import__('os').urandom(8).hex()}")
    await here.declare_queue(name, exclusive=True, owner=connection, server_named=True)
    await until(lambda: name in there.queues)
    routed = there.route("", name, dict)
    assert [queue.name for queue in routed] == [name]
    await routed[0].publish(Record(0, value=b"pong"))
    got = await here.queue(name, connection).get(connection, auto_ack=True)
    assert got is not None and got.value == b"pong"


class Taker:
    """A consumer as a channel is one: takes what it is given."""

    def __init__(self, prefetch: int = 0, auto_ack: bool = False) -> None:
        self.prefetch, self.auto_ack, self.priority = prefetch, auto_ack, 0
        self.got: list = []
        self.cancelled = False

    def can_deliver(self) -> bool:
        return True

    def deliver(self, message) -> None:
        self.got.append(message)

    def queue_deleted(self) -> None:
        self.cancelled = True


async def test_a_queue_of_the_other_broker_is_consumed_acknowledged_and_deleted_through_this_one(brokers) -> None:
    members, services = brokers
    here = await services[0].namespace("public", "default")
    there = await services[1].namespace("public", "default")
    name = served_by(members[1], "work")
    queue = await here.declare_queue(name)
    owned = there.queues[name]
    for i in range(6):
        await owned.publish(Record(0, value=b"%d" % i))

    taker = Taker(prefetch=4)
    await queue.add_consumer(taker)
    await until(lambda: len(taker.got) == 4)                      # the owner's prefetch window holds
    assert [m.value for m in taker.got] == [b"0", b"1", b"2", b"3"] and owned.consumer_count == 1
    queue.subscription.ack([taker.got[0].offset, taker.got[1].offset])
    queue.subscription.reject([taker.got[2].offset], requeue=True)
    await until(lambda: len(taker.got) == 7)
    # The acks made room for two, then the rejected one came back: as on the owner itself.
    assert [(m.value, m.redelivered) for m in taker.got[4:]] == [(b"4", False), (b"5", False), (b"2", True)]

    channel = object()                # cancelled: what it holds stays the channel's until released
    queue.subscription.remove_consumer(taker, holder=channel)
    queue.subscription.release(channel)
    await until(lambda: owned.subscription.unacked_count == 0 and owned.consumer_count == 0)
    again = [await queue.get(channel, auto_ack=True) for _ in range(5)]
    assert sorted(m.value for m in again if m is not None) == [b"2", b"3", b"4", b"5"] and again[-1] is None

    await owned.publish(Record(0, value=b"left"))
    assert await here.delete_queue(name) == 1
    await until(lambda: name not in there.queues and name not in here.queues)


async def test_a_cancel_through_this_broker_has_deleted_an_auto_delete_queue_before_it_is_answered(brokers) -> None:
    """As RabbitMQ's cancel-ok comes after the queue went with its last consumer: the same name
    declared again at once (aio-pika's Master patterns do) is a new queue, which a consumer finds."""
    members, services = brokers
    here = await services[0].namespace("public", "default")
    there = await services[1].namespace("public", "default")
    name = served_by(members[1], "worker")
    for _ in range(5):
        queue = await here.declare_queue(name, auto_delete=True)
        taker = Taker(prefetch=4)
        await queue.add_consumer(taker)
        await until(lambda: name in there.queues and there.queues[name].consumer_count == 1)
        queue.subscription.remove_consumer(taker)
        await here.consumer_removed(queue)                  # answered: cancel-ok
        assert name not in there.queues                     # the queue went with its last consumer
        queue = await here.declare_queue(name, auto_delete=True)
        await until(lambda: name in there.queues)
        taker = Taker(prefetch=4)
        await queue.add_consumer(taker)                     # NotFound if the old one went only now
        queue.subscription.remove_consumer(taker)
        await here.consumer_removed(queue)


async def test_consumers_through_a_link_that_breaks_give_back_what_they_held(brokers) -> None:
    members, services = brokers
    here = await services[0].namespace("public", "default")
    there = await services[1].namespace("public", "default")
    name = served_by(members[1], "held")
    queue = await here.declare_queue(name)
    owned = there.queues[name]
    for i in range(3):
        await owned.publish(Record(0, value=b"%d" % i))
    taker = Taker(prefetch=10)
    await queue.add_consumer(taker)
    await until(lambda: len(taker.got) == 3)
    await services[0]._core.peers.close()           # the link drops: the owner hands them out again
    await until(lambda: owned.subscription.unacked_count == 0 and owned.consumer_count == 0)
    assert await owned.message_count() == 3
    await until(lambda: taker.cancelled)


async def test_an_exclusive_queue_declared_through_this_broker_on_the_other_one_goes_with_its_connection(
        brokers) -> None:
    members, services = brokers
    here = await services[0].namespace("public", "default")
    there = await services[1].namespace("public", "default")
    name = served_by(members[1], "mine")
    connection = object()
    queue = await here.declare_queue(name, exclusive=True, owner=connection)
    assert name in there.queues and not queue.served_here
    with pytest.raises(ResourceLocked):
        await here.declare_queue(name, exclusive=True, owner=object())
    with pytest.raises(ResourceLocked):
        await there.declare_queue(name, exclusive=True, owner=object())
    await queue.publish(Record(0, value=b"reply"))
    got = await here.queue(name, connection).get(connection, auto_ack=True)
    assert got.value == b"reply"
    await here.release_owner(connection)             # the connection closes: the queue goes
    await until(lambda: name not in there.queues and name not in here.queues)


@pytest.mark.parametrize("queue_with_the_store", [True, False], ids=["queue-with-the-store", "queue-elsewhere"])
async def test_a_delayed_message_is_held_by_the_store_of_one_broker_and_released_into_the_queue(
        brokers, queue_with_the_store: bool) -> None:
    """Published through the broker that does not serve the namespace's delayed store, then
    released into a queue of either broker."""
    members, services = brokers
    spaces = [await service.namespace("public", "default") for service in services]
    holder = 0 if members[0].owns(partition_bundle("public", "default", DELAYED_TOPIC, 0)) else 1
    at = holder if queue_with_the_store else 1 - holder
    serving, publisher = spaces[at], spaces[1 - holder]
    name = served_by(members[at], "later")
    await serving.declare_exchange("delays", ExchangeType.DELAYED, arguments={"x-delayed-type": "direct"})
    queue = await serving.declare_queue(name)
    await serving.bind(Binding("delays", name, DestinationKind.QUEUE, "k"))
    await until(lambda: "delays" in publisher.routing.exchanges and name in publisher.queues)
    await publisher.hold("delays", Record(0, key=b"k", value=b"due"), int(time.time() * 1000) + 200)
    deadline = time.monotonic() + 30
    while (got := await queue.get("client", auto_ack=True)) is None:
        assert time.monotonic() < deadline, "the held message was never released"
        await asyncio.sleep(0.05)
    assert got.value == b"due"


async def test_the_delayed_store_moves_with_its_bundle_and_comes_back_without_stale_state(brokers) -> None:
    """The store's bundle moves away and back: each owner in turn serves the store, so a message
    held while it was away is released too, and each message comes out once."""
    members, services = brokers
    spaces = [await service.namespace("public", "default") for service in services]
    store_bundle = partition_bundle("public", "default", DELAYED_TOPIC, 0)
    home = 0 if members[0].owns(store_bundle) else 1
    away = 1 - home
    name = next(f"back{i}" for i in range(500)        # a queue of `home` that stays there
                if members[home].owns(bundle := partition_bundle("public", "default", queue_topic(f"back{i}"), 0))
                and bundle != store_bundle)
    space = spaces[home]
    await space.declare_exchange("delays", ExchangeType.DELAYED, arguments={"x-delayed-type": "direct"})
    queue = await space.declare_queue(name)
    await space.bind(Binding("delays", name, DestinationKind.QUEUE, "k"))
    now_ms = int(time.time() * 1000)
    await space.hold("delays", Record(0, key=b"k", value=b"first"), now_ms + 1500)

    await members[home].place({store_bundle: members[away].local.id})
    await until(lambda: members[away].owns(store_bundle) and not members[home].owns(store_bundle))
    await space.hold("delays", Record(0, key=b"k", value=b"second"), now_ms + 2500)   # held at `away`
    await members[home].place({store_bundle: members[home].local.id})
    await until(lambda: members[home].owns(store_bundle))

    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 2 or time.monotonic() < deadline - 27:     # and a little longer: nothing twice
        message = await queue.get("client", auto_ack=True)
        if message is not None:
            got.append(message.value)
        else:
            assert time.monotonic() < deadline, f"released so far: {got}"
            await asyncio.sleep(0.05)
    assert sorted(got) == [b"first", b"second"]


async def test_pending_counts_and_cancels_are_answered_by_the_store_through_either_broker(brokers) -> None:
    members, services = brokers
    holder = 0 if members[0].owns(partition_bundle("public", "default", DELAYED_TOPIC, 0)) else 1
    delayed = services[1 - holder]._core.delayed          # asks the holder over the peer link
    message_id = await delayed.hold("public", "default", Record(0, value=b"x"), int(time.time() * 1000) + 60_000,
                                    partition_target("bills", 0))
    assert await delayed.pending("public", "default") == {"partition:bills/0": 1}
    assert not await delayed.cancel("public", "default", message_id, topic="invoices")
    assert await delayed.cancel("public", "default", message_id, topic="bills")
    assert (await services[holder]._core.delayed.pending("public", "default")).get("partition:bills/0", 0) == 0


async def test_a_stranger_claiming_a_huge_first_frame_is_cut_off_unread(brokers) -> None:
    members, _ = brokers
    host, _, port = members[1].local.peer.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        await reader.readexactly(4)                          # the listener's nonce frame follows
        writer.write(struct.pack(">I", 100 << 20))         # "100 MiB follow", before any proof
        await writer.drain()
        async with asyncio.timeout(10):
            while await reader.read(65536):
                pass                                        # closed: EOF, nothing allocated for it
    finally:
        writer.close()


async def test_a_message_larger_than_the_old_frame_limit_crosses_the_link(brokers) -> None:
    """64 MiB of body, published through the broker that does not serve the queue (records travel
    as bytes, not base64 in JSON), and read back whole through it."""
    members, services = brokers
    here = await services[0].namespace("public", "default")
    there = await services[1].namespace("public", "default")
    name = served_by(members[1], "large")
    queue = await here.declare_queue(name)
    body = bytes(range(256)) * (256 << 10)
    await queue.publish(Record(0, key=b"k", value=body, headers=(("content-type", b"application/octet-stream"),)))
    got = await queue.get("client", auto_ack=True)
    assert got.value == body and got.headers == (("content-type", b"application/octet-stream"),)
    assert await there.queues[name].message_count() == 0


async def test_a_large_message_dead_lettered_into_a_queue_of_the_other_broker_goes_over_the_link(brokers) -> None:
    """2 MiB: more than a mailbox request could carry. The copy is in the queue there before the
    original leaves its queue here."""
    members, services = brokers
    here = await services[0].namespace("public", "default")
    there = await services[1].namespace("public", "default")
    source, target = served_by(members[0], "src"), served_by(members[1], "dlq")
    await there.declare_queue(target)
    await here.declare_queue(source, arguments={"x-max-length": 1, "x-dead-letter-exchange": "",
                                                "x-dead-letter-routing-key": target})
    large = b"d" * (2 << 20)
    for value in (large, b"kept"):
        await here.queues[source].publish(Record(0, value=value))
    deadline = time.monotonic() + 30
    while (dead := await there.queues[target].get("client", auto_ack=True)) is None:
        assert time.monotonic() < deadline, "the dead-lettered copy never arrived"
        await asyncio.sleep(0.02)
    assert dead.value == large and any(name == "queue.death" for name, _ in dead.headers)
    assert await here.queues[source].message_count() == 1

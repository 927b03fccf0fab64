"""Exchanges, queues and bindings in a cluster: every broker routes by what any broker declared,
bound or deleted (the store is the truth, a watched node says when it changed), transient objects
live as long as the broker process that declared them, and a server-named queue is named into a
bundle of the broker whose client declared it.

Two brokers on one embedded (SQLite) store, in one process."""

from __future__ import annotations

import asyncio

import pytest

from core.cluster.broker_cluster import BrokerCluster
from core.cluster.bundles import partition_bundle
from core.errors import InequivalentDeclaration, ResourceLocked
from core.queues.exchange import Binding, DestinationKind, ExchangeType
from core.queues.naming import queue_topic
from core.queues.routing import no_properties as no_headers
from core.queues.service import publish
from core.queues.store import NamespaceStore
from core.records.builder import Record
from core.service import Core
from tests.core.cluster.test_cluster_membership import until


def served_by(member: BrokerCluster, prefix: str) -> str:
    """A queue name whose bundle `member` owns (a queue is declared through its owner)."""
    return next(f"{prefix}{i}" for i in range(500)
                if member.owns(partition_bundle("public", "default", queue_topic(f"{prefix}{i}"), 0)))


def routed(space, exchange: str, key: str) -> list[str]:
    try:
        return [queue.name for queue in space.route(exchange, key, no_headers)]
    except Exception:       # the exchange is not known (yet, or any more)
        return []


async def test_what_one_broker_declares_binds_and_deletes_the_other_routes_by(brokers) -> None:
    members, services = brokers
    here = await services[0].namespace("public", "default")
    there = await services[1].namespace("public", "default")     # loaded before any of it exists
    paid = served_by(members[0], "paid")
    await here.declare_exchange("orders", ExchangeType.DIRECT)
    await here.declare_queue(paid)
    binding = Binding("orders", paid, DestinationKind.QUEUE, "paid")
    await here.bind(binding)
    await until(lambda: routed(there, "orders", "paid") == [paid])

    await here.unbind(binding)
    await until(lambda: routed(there, "orders", "paid") == [] and "orders" in there.routing.exchanges)
    await there.bind(binding)                                      # the other way round too
    await until(lambda: routed(here, "orders", "paid") == [paid])

    await here.delete_queue(paid)
    await until(lambda: paid not in there.queues and not there.routing.bindings_from("orders"))
    await here.delete_exchange("orders")
    await until(lambda: "orders" not in there.routing.exchanges)


async def test_a_transient_queue_lives_as_long_as_the_broker_process_that_declared_it(brokers, storage) -> None:
    members, services = brokers
    here = await services[0].namespace("public", "default")
    reply_to = served_by(members[0], "reply-to")
    connection = object()
    await here.declare_queue(reply_to, exclusive=True, owner=connection)
    await here.declare_exchange("scratch", ExchangeType.FANOUT, durable=False)
    await here.bind(Binding("scratch", reply_to, DestinationKind.QUEUE, ""), owner=connection)

    # The other broker loads the namespace now: it keeps them (before, loading deleted every
    # transient row as left over from an earlier run), routes to the queue, and locks it.
    there = await services[1].namespace("public", "default")
    assert routed(there, "scratch", "") == [reply_to]
    with pytest.raises(ResourceLocked):
        await there.declare_queue(reply_to, exclusive=True, owner=object())
    store = NamespaceStore(storage.metadata, "public", "default")
    assert await store.get_queue(reply_to) is not None

    await members[0].close()        # the declaring broker goes: so do its transient queue and exchange
    await until(lambda: reply_to not in there.queues and "scratch" not in there.routing.exchanges)
    await until(queue_gone(store, reply_to))      # deleted once the other broker serves it
    assert not any(exchange.name == "scratch" for exchange in (await store.load()).exchanges)


async def test_a_transient_queue_left_behind_is_deleted_by_the_broker_serving_it_only(three_brokers, storage,
                                                                                        monkeypatch) -> None:
    # The broker serving the queue has its log open; another broker deleting the ledgers under it
    # made that log fail to seal when it closed.
    members, services = three_brokers
    spaces = [await service.namespace("public", "default") for service in services]
    reply_to = served_by(members[1], "reply-to")
    await spaces[0].declare_queue(reply_to, exclusive=True, owner=object())    # through the broker serving it
    await until(lambda: all(reply_to in space.queues for space in spaces))
    await asyncio.gather(*publish([spaces[1].queues[reply_to]], Record(1_700_000_000_000, value=b"x")))
    bundle = partition_bundle("public", "default", queue_topic(reply_to), 0)
    deleting: list[bool] = []        # whether each broker deleting the topic served it
    delete_topic = Core.delete_topic

    async def noted(core, name):
        deleting.append(core.cluster.owns(bundle))
        await delete_topic(core, name)
    monkeypatch.setattr(Core, "delete_topic", noted)

    await members[0].close()        # the declaring broker goes
    store = NamespaceStore(storage.metadata, "public", "default")
    await until(queue_gone(store, reply_to))
    await until(lambda: all(reply_to not in space.queues for space in spaces[1:]))
    assert deleting and all(deleting)


def queue_gone(store: NamespaceStore, name: str):
    async def gone() -> bool:
        return await store.get_queue(name) is None
    return gone


async def test_a_server_named_queue_is_named_into_a_bundle_its_broker_owns(brokers) -> None:
    members, services = brokers
    for member, service in zip(members, services):
        space = await service.namespace("public", "default")
        counter = iter(range(10_000))
        for _ in range(20):
            name = space.local_name(lambda: f"amq.gen-{next(counter)}")
            assert member.owns(partition_bundle("public", "default", queue_topic(name), 0))


async def test_a_publish_to_a_queue_not_followed_yet_finds_it_in_the_store(brokers) -> None:
    members, services = brokers
    here = await services[0].namespace("public", "default")
    there = await services[1].namespace("public", "default")
    there._unwatch()                 # this broker hears of nothing: only the look-up can find it
    name = served_by(members[0], "reply")
    await here.declare_queue(name)
    assert routed(there, "", name) == []
    await there.look_up("", name)
    assert routed(there, "", name) == [name]
    await there.look_up("", "")      # an empty routing key names no queue: nothing to look up
    await there.look_up("", "never-declared")
    assert routed(there, "", "never-declared") == []


async def test_two_brokers_declaring_one_exchange_at_once_agree_on_the_first(brokers) -> None:
    """As in a RabbitMQ cluster: the first declaration stands, a different one at the same moment
    through the other broker is refused (PRECONDITION_FAILED), and both brokers route by the first."""
    _, services = brokers
    spaces = [await service.namespace("public", "default") for service in services]
    for attempt in range(5):
        name = f"contested-{attempt}"
        outcomes = await asyncio.gather(spaces[0].declare_exchange(name, ExchangeType.DIRECT),
                                        spaces[1].declare_exchange(name, ExchangeType.FANOUT),
                                        return_exceptions=True)
        won = [o for o in outcomes if not isinstance(o, BaseException)]
        refused = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(won) == 1 and len(refused) == 1, outcomes
        assert isinstance(refused[0], InequivalentDeclaration)
        await until(lambda: all(space.routing.exchanges.get(name) is not None
                                and space.routing.exchanges[name].type == won[0].type for space in spaces))


async def test_a_queue_whose_owner_lost_its_term_is_released_without_waiting_for_its_position(brokers) -> None:
    """As a broker paused past its session finds on waking: the queue's position can no longer be
    saved (Fenced, for good). Releasing its bundle must still finish, or the broker never takes
    part in the cluster again."""
    members, services = brokers
    space = await services[0].namespace("public", "default")
    name = served_by(members[0], "fenced")
    queue = await space.declare_queue(name)
    await queue.publish(Record(0, value=b"one"))
    await queue.publish(Record(0, value=b"two"))
    bundle = queue.bundle
    first = await queue.get("client", auto_ack=True)    # stores the queue's delivery reservation
    assert first.value == b"one"
    await services[0]._core.metadata.delete(members[0].guard(bundle).path)     # the term went with the session
    got = await queue.get("client", auto_ack=True)                              # moves the position: cannot be saved
    assert got.value == b"two"
    await asyncio.sleep(0.05)
    async with members[0]._steps, asyncio.timeout(10):       # no step takes the bundle again meanwhile
        await members[0]._release(bundle, give_up_lease=False)
        assert not members[0].owns(bundle)

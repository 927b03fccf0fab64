"""Brokers sharing a metadata store: registration, a leader that spreads the bundles, leases, the
core refusing partitions of bundles it does not own, and hand-over when a broker goes.

Two brokers on one embedded (SQLite) store show the ownership rules in one process; the session
events that only ZooKeeper has (SUSPENDED, LOST) run against a real private ZooKeeper."""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import time
from collections.abc import Awaitable, Callable

import pytest
from kazoo.client import KazooClient

from core.cluster.assignment import assign
from core.cluster.broker_cluster import BrokerCluster
from core.cluster.bundles import BUNDLES_PER_NAMESPACE, group_bundle, namespace_bundles, partition_bundle
from core.cluster.members import BrokerInfo
from core.errors import NotCoordinator, NotOwner
from core.groups.store import GroupKey, GroupRecord, GroupStore
from core.groups.values import OffsetAndMetadata
from core.clock import SystemClock
from core.names import TopicName
from core.queues.service import QueueService
from core.registry import Registry
from core.records.builder import Record, build_batch
from core.service import Core
from core.shares.coordinator import ShareCoordinator
from core.shares.share_partition import ACCEPT
from gateway.cluster.zookeeper import ZooKeeperServer
from storage.config import StorageConfig
from storage.api import Fenced
from storage.embedded import EmbeddedStorage
from storage.metadata.zookeeper import ZooKeeperMetadataStore

POLL_S = 0.05
ALL = set(namespace_bundles("public", "default"))


def broker(broker_id: int) -> BrokerInfo:
    return BrokerInfo(broker_id, "127.0.0.1", 9000 + broker_id, f"127.0.0.1:{5600 + broker_id}",
                      instance=f"instance-{broker_id}-{time.monotonic_ns()}")


async def until(predicate: Callable[[], bool | Awaitable[bool]], timeout_s: float = 30.0) -> None:
    """Poll `predicate` (a plain or an async function) until it holds."""
    deadline = time.monotonic() + timeout_s
    while not ((await met) if inspect.isawaitable(met := predicate()) else met):
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def split_evenly(*members: BrokerCluster) -> bool:
    held = [m.held for m in members]
    return (set().union(*held) == ALL and sum(map(len, held)) == len(ALL)
            and max(map(len, held)) - min(map(len, held)) <= 1)


@pytest.fixture
async def storage(tmp_path):
    opened = await EmbeddedStorage.open(tmp_path / "data", StorageConfig())
    yield opened
    await opened.close()


async def test_two_brokers_split_the_bundles_and_the_survivor_takes_them_all(storage) -> None:
    await Registry(storage.metadata, SystemClock()).start()   # the default namespace
    first, second = (BrokerCluster(storage.metadata, broker(i), poll_s=POLL_S) for i in (1, 2))
    await first.start()
    await second.start()
    await until(lambda: split_evenly(first, second))
    assert [b.id for b in first.brokers()] == [1, 2] and first.is_leader and not second.is_leader
    assert first.owner(next(iter(second.held))).id == 2

    await first.close()   # the leader goes: the other one is elected and takes every bundle
    await until(lambda: second.held == ALL and second.is_leader)
    await second.close()


async def test_close_returns_when_a_change_wakes_the_broker_as_it_is_cancelled(storage) -> None:
    """A watch firing just before close()'s cancel must not keep the membership loop alive (Python
    3.11's asyncio.wait_for returned instead of raising there: close() hung). The wake-up takes a few
    loop turns to reach the loop; the cancel comes after each number of them."""
    await Registry(storage.metadata, SystemClock()).start()
    for turns in range(6):
        member = BrokerCluster(storage.metadata, broker(1), poll_s=3600)
        await member.start()
        await until(lambda: member.held == ALL)
        await until(lambda: bool(member._changed._waiters))   # the loop parks on its wake-up event
        member._wake()
        for _ in range(turns):
            await asyncio.sleep(0)
        async with asyncio.timeout(10):
            await member.close()
        assert member._task.done() and not member.held


async def test_the_core_serves_only_partitions_of_bundles_it_owns(storage) -> None:
    await Registry(storage.metadata, SystemClock()).start()   # the default namespace
    local, other = (BrokerCluster(storage.metadata, broker(i), poll_s=POLL_S) for i in (1, 2))
    core = Core(storage.metadata, storage.logs, cluster=local)
    await core.start()
    await local.start()
    await other.start()
    await until(lambda: split_evenly(local, other))
    topic = TopicName.of("orders")
    await core.create_topic(topic, 32)
    mine = [i for i in range(32) if local.owns(partition_bundle("public", "default", "orders", i))]
    theirs = [i for i in range(32) if i not in mine]
    assert mine and theirs
    await (await core.partition(topic, mine[0])).append(_batch())
    with pytest.raises(NotOwner, match="served by broker 2"):
        await core.partition(topic, theirs[0])

    await other.close()
    await until(lambda: local.held == ALL)
    partition = await core.partition(topic, theirs[0])
    assert partition.high_watermark == 0
    await local.close()   # releasing closes what the core has open
    with pytest.raises(NotOwner):
        await core.partition(topic, mine[0])
    await core.close()


async def test_a_new_owner_fences_at_once_the_logs_a_zombie_left_open(storage) -> None:
    """A writer that still appends to a partition (a broker paused past its session, here a core that
    checks no ownership) is fenced as soon as another broker takes the bundle, before any client
    asks the new owner for that partition."""
    zombie = Core(storage.metadata, storage.logs)
    await zombie.start()
    topic = TopicName.of("busy")
    await zombie.create_topic(topic, 1)
    stale = await zombie.partition(topic, 0)
    await stale.append(_batch())                                  # its ledger is open now
    owner = BrokerCluster(storage.metadata, broker(2), poll_s=POLL_S)
    core = Core(storage.metadata, storage.logs, cluster=owner)
    await core.start()
    await owner.start()
    await until(lambda: owner.held == ALL)
    await until(lambda: (topic, 0) in core._partitions)          # opened by the takeover, unasked
    with pytest.raises(NotOwner):
        await stale.append(_batch())
    taken = await core.partition(topic, 0)
    assert taken.high_watermark == 1
    assert await taken.append(_batch()) == 1
    await owner.close()
    await core.close()
    await zombie.close()


async def test_what_an_owner_writes_carries_its_term_and_stops_landing_when_the_term_ends(storage) -> None:
    """Offset commits (written by the group's coordinator) and cursors (by the partition's owner) go
    through the guarded view: with the term node gone, as a session's expiry deletes it, they are
    refused and what was stored stays."""
    await Registry(storage.metadata, SystemClock()).start()
    owner = BrokerCluster(storage.metadata, broker(1), poll_s=POLL_S)
    core = Core(storage.metadata, storage.logs, cluster=owner)
    await core.start()
    await owner.start()
    await until(lambda: owner.held == ALL)
    topic = TopicName.of("ledger")
    await core.create_topic(topic, 1)
    store, key = GroupStore(core), GroupKey("public", "default", "billing")
    record = GroupRecord()
    await store.commit(key, record, {("ledger", 0): OffsetAndMetadata(10)}, "consumer")
    cursor = await core.cursor(topic, 0, "queue")
    cursor.commit(3)
    await cursor.flush()

    for bundle in (group_bundle("public", "default", "billing"), partition_bundle("public", "default", "ledger", 0)):
        await storage.metadata.delete(owner.guard(bundle).path)
    with pytest.raises(NotCoordinator):
        await store.commit(key, record, {("ledger", 0): OffsetAndMetadata(5)}, "consumer")
    cursor.commit(1)
    with pytest.raises(Fenced):
        await cursor.flush()
    assert (await store.fetch(key, [("ledger", 0)]))[("ledger", 0)].offset == 10
    assert (await core.cursor(topic, 0, "queue")).committed_offset == 3
    await owner.close()
    with pytest.raises(Fenced, match="does not own"):       # no term at all once released
        owner.guard(partition_bundle("public", "default", "ledger", 0))
    await core.close()


async def test_queues_of_a_moved_bundle_refuse_publishes_and_cancel_their_consumers(storage) -> None:
    await Registry(storage.metadata, SystemClock()).start()
    local, other = (BrokerCluster(storage.metadata, broker(i), poll_s=POLL_S) for i in (1, 2))
    core = Core(storage.metadata, storage.logs, cluster=local)
    await core.start()
    await local.start()
    queues = QueueService(core)
    space = await queues.namespace("public", "default")
    await until(lambda: local.held == ALL)
    # A queue whose bundle the leader gives to the second broker once it joins.
    moving = {b for b, owner in assign([b.path for b in ALL], {b.path: 1 for b in ALL}, [1, 2]).items() if owner == 2}
    name = next(f"q{i}" for i in range(100) if partition_bundle("public", "default", f"q{i}", 0).path in moving)
    await space.declare_queue(name)
    await space.queues[name].publish(Record(0, value=b"kept"))
    cancelled: list[str] = []
    subscription = await space.queues[name].open()
    subscription.consumers.append(_Consumer(cancelled))

    await other.start()
    await until(lambda: split_evenly(local, other))
    assert not local.owns(space.queues[name].bundle)
    assert cancelled == ["cancelled"]
    with pytest.raises(NotOwner, match="served by broker 2"):
        space.queues[name].publish(Record(0, value=b"refused"))
    await other.close()
    await until(lambda: local.held == ALL)   # back: the fresh queue serves again
    await space.queues[name].publish(Record(0, value=b"again"))
    await local.close()
    await core.close()


async def test_a_queue_declared_through_another_broker_keeps_its_messages_when_taken_over(storage) -> None:
    """Broker 2 loaded the namespace before broker 1 declared the queue; when broker 2 takes the
    queue's bundle and a client declares it there, the unconsumed messages are still delivered."""
    await Registry(storage.metadata, SystemClock()).start()
    first, second = (BrokerCluster(storage.metadata, broker(i), poll_s=POLL_S) for i in (1, 2))
    cores = [Core(storage.metadata, storage.logs, cluster=c) for c in (first, second)]
    services = [QueueService(core) for core in cores]
    for core in cores:
        await core.start()
    await first.start()
    await until(lambda: first.held == ALL)
    early = await services[1].namespace("public", "default")       # before the queue exists
    space = await services[0].namespace("public", "default")
    await space.declare_queue("kept")
    for value in (b"one", b"two", b"three"):
        await space.queues["kept"].publish(Record(0, value=value))
    await first.close()                                            # broker 1 goes
    await second.start()
    await until(lambda: second.held == ALL)
    queue = await early.declare_queue("kept")                      # the client declares again
    got = [await queue.get("client", auto_ack=True) for _ in range(3)]
    assert [m.value for m in got if m is not None] == [b"one", b"two", b"three"]
    await second.close()
    for core in cores:
        await core.close()


async def test_a_message_dead_lettered_into_a_queue_of_another_broker_reaches_it(storage) -> None:
    """The dead-letter queue's bundle is on the other broker, which declared it after this one
    loaded the namespace: the copy goes through its mailbox and is in the queue there before the
    original leaves its queue here."""
    await Registry(storage.metadata, SystemClock()).start()
    members = [BrokerCluster(storage.metadata, broker(i), poll_s=POLL_S) for i in (1, 2)]
    cores = [Core(storage.metadata, storage.logs, cluster=member) for member in members]
    services = [QueueService(core) for core in cores]
    for core, member in zip(cores, members):
        await core.start()
        await member.start()
    await until(lambda: split_evenly(*members))
    source = next(f"src{i}" for i in range(200) if members[0].owns(partition_bundle("public", "default", f"src{i}", 0)))
    target = next(f"dlq{i}" for i in range(200) if members[1].owns(partition_bundle("public", "default", f"dlq{i}", 0)))
    here = await services[0].namespace("public", "default")
    there = await services[1].namespace("public", "default")
    await there.declare_queue(target)          # through broker 2 only: broker 1 finds it in the store
    await here.declare_queue(source, arguments={"x-max-length": 1, "x-dead-letter-exchange": "",
                                                "x-dead-letter-routing-key": target})
    for value in (b"pushed-out", b"kept"):
        await here.queues[source].publish(Record(0, value=value))
    dead = None
    for _ in range(500):
        dead = await there.queues[target].get("client", auto_ack=True)
        if dead is not None:
            break
        await asyncio.sleep(0.02)
    assert dead is not None and dead.value == b"pushed-out"
    assert await here.queues[source].message_count() == 1
    for core, member in zip(cores, members):
        await member.close()
        await core.close()


async def test_a_share_partition_follows_its_bundle_and_keeps_its_acknowledgements(storage) -> None:
    """Broker 1 hands out records of a share group and takes acknowledgements; once broker 2 owns
    the partition, broker 1 refuses the share partition and broker 2 opens it from the cursor: the
    accepted record stays done, the one handed out but not settled is available again."""
    await Registry(storage.metadata, SystemClock()).start()
    first, second = (BrokerCluster(storage.metadata, broker(i), poll_s=POLL_S) for i in (1, 2))
    cores = [Core(storage.metadata, storage.logs, cluster=c) for c in (first, second)]
    shares = [ShareCoordinator(core) for core in cores]
    for core in cores:
        await core.start()
    await first.start()
    await until(lambda: first.held == ALL)
    moving = {b for b, owner in assign([b.path for b in ALL], {b.path: 1 for b in ALL}, [1, 2]).items() if owner == 2}
    name = TopicName.of(next(f"s{i}" for i in range(100)
                             if partition_bundle("public", "default", f"s{i}", 0).path in moving))
    key = GroupKey("public", "default", "workers")
    await cores[0].create_topic(name, 1)
    share = await shares[0].share_partition(key, name, 0)      # starts at the end: produce after
    partition = await cores[0].partition(name, 0)
    for value in (b"a", b"b"):
        await partition.append(build_batch([Record(0, value=value)]))
    assert (await share.fetch("m1", 2)).acquired == [(0, 1, 1)]
    assert share.acknowledge("m1", 0, 0, [ACCEPT])
    await share.flush()

    await second.start()
    await until(lambda: split_evenly(first, second))
    with pytest.raises(NotOwner):
        await shares[0].share_partition(key, name, 0)
    taken = await shares[1].share_partition(key, name, 0)
    assert taken.start_offset == 1
    assert (await taken.fetch("m2", 10)).acquired == [(1, 1, 2)]   # handed out on broker 1, never settled
    await second.close()
    await first.close()
    for core in cores:
        await core.close()


async def test_a_broker_whose_session_is_not_confirmed_within_its_timeout_hands_nothing_out(storage) -> None:
    """A broker paused past its session must not hand a queue's read-ahead to consumers when it
    wakes, before it learns that the session expired: from the instant its session was last
    confirmed alive longer ago than its timeout, it owns nothing. Confirmed again (the session
    lived), it goes on."""
    alive_until = [math.inf]
    storage.metadata.session_alive_until = lambda: alive_until[0]
    await Registry(storage.metadata, SystemClock()).start()
    local = BrokerCluster(storage.metadata, broker(1), poll_s=POLL_S)
    core = Core(storage.metadata, storage.logs, cluster=local)
    await core.start()
    await local.start()
    space = await QueueService(core).namespace("public", "default")
    await until(lambda: local.held == ALL)
    await space.declare_queue("payments")
    queue = space.queues["payments"]
    for i in range(3):
        await queue.publish(Record(0, value=b"%d" % i))
    subscription = await queue.open()
    consumer = _Collecting()
    subscription.add_consumer(consumer)
    await until(lambda: len(consumer.got) == 1)

    alive_until[0] = time.monotonic()             # not confirmed since: as after a long pause
    assert local.suspended and not local.owns(queue.bundle)
    subscription.ack([consumer.got[0].offset])    # an ack read on waking frees the prefetch ...
    assert len(consumer.got) == 1                 # ... and nothing is handed out
    assert await subscription.get("a-basic-get", auto_ack=True) is None
    with pytest.raises(NotOwner):
        await core.partition(TopicName.of("payments"), 0)

    alive_until[0] = math.inf                     # the session is confirmed again
    await until(lambda: len(consumer.got) == 2)
    assert consumer.seen == [(b"0", False), (b"1", False)]
    await local.close()
    await core.close()


class _Collecting:
    def __init__(self) -> None:
        self.prefetch, self.auto_ack = 1, False
        self.got, self.seen = [], []

    def can_deliver(self) -> bool:
        return True

    def deliver(self, message) -> None:
        self.got.append(message)
        self.seen.append((message.value, message.redelivered))

    def queue_deleted(self) -> None:
        pass


class _Consumer:
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.prefetch, self.auto_ack = 0, False

    def can_deliver(self) -> bool:
        return False

    def deliver(self, message) -> None:
        pass

    def queue_deleted(self) -> None:
        self.log.append("cancelled")


async def test_a_placed_bundle_moves_to_its_broker_and_its_partition_goes_on_on_a_new_ledger(storage) -> None:
    """A logical-queue move: the old owner seals the partition's ledger, the new one continues the
    offsets on a ledger of its own, and a reader reads across the boundary. Load balancing then
    leaves the placed bundle where it was put."""
    await Registry(storage.metadata, SystemClock()).start()
    first, second = (BrokerCluster(storage.metadata, broker(i), poll_s=POLL_S) for i in (1, 2))
    cores = {1: Core(storage.metadata, storage.logs, cluster=first), 2: Core(storage.metadata, storage.logs, cluster=second)}
    for core in cores.values():
        await core.start()
    await first.start()
    await second.start()
    await until(lambda: split_evenly(first, second))
    topic = TopicName.of("moving")
    await cores[1].create_topic(topic, 16)
    index = next(i for i in range(16) if first.owns(partition_bundle("public", "default", "moving", i)))
    bundle = partition_bundle("public", "default", "moving", index)
    for _ in range(3):
        await (await cores[1].partition(topic, index)).append(_batch())
    assert await first.moves() == {}

    await first.place({bundle: 2})
    moving = await first.moves()
    assert list(moving) in ([bundle], [])      # in progress until broker 2 holds the lease
    await until(lambda: second.owns(bundle) and not first.owns(bundle))
    assert await first.moves() == {}
    assert await first.cancel_moves([bundle]) == {bundle}        # nothing left to cancel
    partition = await cores[2].partition(topic, index)
    assert partition.high_watermark == 3
    assert await partition.append(_batch()) == 3
    listing = json.loads((await storage.metadata.get(f"/logs/{topic.partition_log(index)}")).value)
    sealed, current = listing["ledgers"][-2:]
    assert (sealed["first_offset"], sealed["end_offset"]) == (0, 3) and current["first_offset"] == 3
    read = await partition.read(0, 1 << 20)
    assert read.records.count(b"v") == 4
    with pytest.raises(NotOwner, match="served by broker 2"):
        await cores[1].partition(topic, index)
    await first.close()
    await second.close()
    for core in cores.values():
        await core.close()


def _batch() -> bytes:
    return build_batch([Record(0, value=b"v")])


# --- sessions, against ZooKeeper ------------------------------------------------------------------


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory) -> ZooKeeperServer:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    yield server
    server.stop()


def _expire(store: ZooKeeperMetadataStore, address: str) -> None:
    """Expire the store's session: a second client attaches to it and closes it."""
    session_id, password = store._client.client_id
    intruder = KazooClient(hosts=address, client_id=(session_id, password))
    intruder.start(timeout=15)
    intruder.stop()
    intruder.close()


async def test_a_lost_session_drops_every_bundle_and_the_broker_competes_again(zookeeper) -> None:
    url = f"zk://{zookeeper.address}/lost-{time.monotonic_ns()}"
    stores = [await ZooKeeperMetadataStore.open(url) for _ in range(2)]
    await Registry(stores[0], SystemClock()).start()
    members = [BrokerCluster(store, broker(i), poll_s=POLL_S) for i, store in enumerate(stores)]
    released: list = []
    for member in members:
        await member.start()
    members[0].on_release(lambda bundle: _record(released, bundle))
    try:
        await until(lambda: split_evenly(*members))
        had = members[0].held
        await asyncio.to_thread(_expire, stores[0], zookeeper.address)
        await until(lambda: set(had) <= set(released))          # dropped with the session
        await until(lambda: split_evenly(*members) and not members[0].suspended, 60)   # back, a share again
        assert len(members[0].brokers()) == 2
    finally:
        for member in members:
            await member.close()
        for store in stores:
            await store.close()


async def test_a_session_is_surely_alive_for_its_timeout_after_a_request_it_sent_was_answered(zookeeper) -> None:
    """What a broker's lease on its bundles rests on: ZooKeeper expires a session only after
    hearing nothing from it for its timeout. A new session counts from its first answer."""
    store = await ZooKeeperMetadataStore.open(f"zk://{zookeeper.address}/alive-{time.monotonic_ns()}",
                                              session_timeout_s=6.0)
    try:
        sent = time.monotonic()
        assert await store.get("/nothing") is None          # an answer, even if the node is absent
        assert sent + 6.0 <= store.session_alive_until() <= time.monotonic() + 6.0
        lost_session = store.session_id
        await asyncio.to_thread(_expire, store, zookeeper.address)
        await until(lambda: store.session_id not in (None, lost_session), 60)
        assert store.session_alive_until() == -math.inf   # nothing answered in the new one yet
        sent = time.monotonic()
        await store.children("/")
        assert store.session_alive_until() >= sent + 6.0
    finally:
        await store.close()


async def test_a_write_guarded_by_a_lost_term_is_refused_even_on_the_next_session(zookeeper) -> None:
    """The zombie case: a write that took its guard before the session expired reaches ZooKeeper on
    the store's next session (kazoo reconnects by itself). It must not land over the value the
    bundle's next owner wrote."""
    url = f"zk://{zookeeper.address}/terms-{time.monotonic_ns()}"
    stores = [await ZooKeeperMetadataStore.open(url) for _ in range(2)]
    await Registry(stores[0], SystemClock()).start()
    members = [BrokerCluster(store, broker(i), poll_s=POLL_S) for i, store in enumerate(stores)]
    for member in members:
        await member.start()
    try:
        await until(lambda: split_evenly(*members))
        bundle = min(members[0].held)
        stale = members[0].guard(bundle)
        await stores[0].put("/cursors/t/0/g", b"old", guard=stale)
        lost_session = stores[0].session_id
        await asyncio.to_thread(_expire, stores[0], zookeeper.address)
        await until(lambda: stores[0].session_id not in (None, lost_session), 60)   # a new session
        await until(lambda: any(bundle in m.held for m in members), 60)
        new_owner = next(m for m in members if bundle in m.held)
        await new_owner.metadata.put("/cursors/t/0/g", b"new", guard=new_owner.guard(bundle))
        assert new_owner.guard(bundle) != stale
        with pytest.raises(Fenced):
            await stores[0].put("/cursors/t/0/g", b"late", guard=stale)
        assert (await stores[1].get("/cursors/t/0/g")).value == b"new"
    finally:
        for member in members:
            await member.close()
        for store in stores:
            await store.close()


async def _record(into: list, bundle) -> None:
    into.append(bundle)


def test_bundle_count_is_what_the_docs_say() -> None:
    assert len(ALL) == BUNDLES_PER_NAMESPACE == 16

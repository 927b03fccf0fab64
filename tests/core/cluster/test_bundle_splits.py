"""Splitting a bundle: the owner cuts it in two, its partitions and queues go on where they were
(offsets continue on new ledgers), every broker follows the new layout, and no half is taken while
a lease overlapping it is held. Two brokers in one process on one embedded store (conftest.py)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from core.cluster.broker_cluster import LEASES
from core.cluster.bundles import LAYOUTS, namespace_bundles, partition_bundle
from core.cluster.splits import SPLITS, SplitLimits, request_split
from core.delayed.store import SYSTEM_TOPIC as DELAYED_TOPIC
from core.names import TopicName
from core.queues.exchange import Binding, DestinationKind, ExchangeType
from core.queues.naming import queue_topic
from core.records.builder import Record, build_batch
from storage.api import Fenced, StorageError
from tests.core.cluster.test_cluster_membership import until

TOPIC = TopicName.of("orders")
PARTITIONS = 64


def _batch(value: bytes = b"v") -> bytes:
    return build_batch([Record(0, value=value)])


async def _busy_bundle(member, core):
    """A bundle `member` owns holding at least two partitions of TOPIC, and those partitions."""
    await core.create_topic(TOPIC, PARTITIONS)
    by_bundle: dict = {}
    for index in range(PARTITIONS):
        by_bundle.setdefault(partition_bundle("public", "default", TOPIC.topic, index), []).append(index)
    return next((bundle, indexes) for bundle, indexes in sorted(by_bundle.items())
                if member.owns(bundle) and len(indexes) >= 2)


async def test_a_split_bundles_partitions_go_on_at_their_offsets_and_both_brokers_see_the_halves(brokers) -> None:
    (first, second), services = brokers
    core = services[0]._core
    bundle, indexes = await _busy_bundle(first, core)
    for i, index in enumerate(indexes):
        for _ in range(i + 1):
            await (await core.partition(TOPIC, index)).append(_batch())

    low, high = await first.split(bundle)
    assert low.upper == high.lower and (low.lower, high.upper) == (bundle.lower, bundle.upper)
    await until(lambda: first.owns(low) and first.owns(high))     # the parent's broker keeps both
    await until(lambda: second.owner(low) is not None and second.owner(low).id == 1 and not second.owns(high))
    assert len(namespace_bundles("public", "default")) == 17 and bundle not in second.layouts.bundles("public", "default")
    stored = json.loads((await core.metadata.get(LAYOUTS)).value)
    assert low.upper in stored["public/default"]
    # Each half holds some of the partitions (the split divides their traffic), and each goes on.
    halves = {partition_bundle("public", "default", TOPIC.topic, index) for index in indexes}
    assert halves == {low, high}
    for i, index in enumerate(indexes):
        partition = await core.partition(TOPIC, index)
        assert partition.high_watermark == i + 1
        assert await partition.append(_batch(b"after")) == i + 1
        assert (await partition.read(0, 1 << 20)).records.count(b"v") == i + 1
    with pytest.raises(ValueError, match="does not own"):
        await second.split(low)
    assert await core.metadata.get(f"{LEASES}/{bundle.path}") is None


async def test_an_operators_request_is_carried_out_by_the_owner_and_then_dropped(brokers) -> None:
    (first, second), services = brokers
    bundle = next(iter(sorted(first.held)))
    at = bundle.lower + (bundle.upper - bundle.lower) // 4
    await request_split(services[1]._core.metadata, bundle, at)     # asked through the other broker
    low, high = bundle.halves(at)
    await until(lambda: first.owns(low) and first.owns(high))
    await until(lambda: second.layouts.bundles("public", "default") == first.layouts.bundles("public", "default"))
    # Dropped in the step that split it, before the halves were taken.
    assert bundle.path not in json.loads((await services[0]._core.metadata.get(SPLITS)).value)


async def test_a_half_is_not_taken_while_an_overlapping_lease_is_held(brokers) -> None:
    """A broker that read the new layout early and took a half before the parent's owner let go
    must not be served alongside it: here such a lease is made by hand on the upper half."""
    (first, _), services = brokers
    metadata = services[0]._core.metadata
    bundle = next(iter(sorted(first.held)))
    low, high = bundle.halves((bundle.lower + bundle.upper) // 2)
    await metadata.create(f"{LEASES}/{high.path}", json.dumps({"broker": 9, "instance": "elsewhere"}).encode())
    await first.split(bundle, low.upper)
    await until(lambda: first.owns(low))
    assert not first.owns(high)
    await metadata.delete(f"{LEASES}/{high.path}")
    await until(lambda: first.owns(high))


async def test_the_owner_splits_a_busy_bundle_of_its_own_accord_up_to_the_limit(brokers) -> None:
    (first, _), services = brokers
    core = services[0]._core
    bundle, indexes = await _busy_bundle(first, core)
    first.split_limits = SplitLimits(messages_per_s=5, bytes_per_s=1 << 30, max_bundles=17)
    first._report_interval_s = 0.2
    first.traffic = core.bundle_traffic
    for _ in range(40):
        for index in indexes[:2]:
            await (await core.partition(TOPIC, index)).append(_batch())
        await asyncio.sleep(0.01)
        if len(first.layouts.bundles("public", "default")) > 16:
            break
    await until(lambda: len(first.layouts.bundles("public", "default")) == 17)
    assert bundle not in first.layouts.bundles("public", "default")
    first_half = partition_bundle("public", "default", TOPIC.topic, indexes[0])
    await until(lambda: first.owns(first_half))
    assert first_half != partition_bundle("public", "default", TOPIC.topic, indexes[1])   # split between them
    with pytest.raises(ValueError, match="the most it may"):
        await first.split(first_half)


async def test_a_split_that_failed_after_writing_the_layout_does_not_block_its_halves(brokers, monkeypatch) -> None:
    """The owner wrote the new layout, then lost the store before giving the parent's lease up: its
    own leftover lease is dropped when it takes the halves, instead of blocking them forever."""
    (first, _), services = brokers
    metadata = services[0]._core.metadata
    bundle = next(iter(sorted(first.held)))

    async def failing(bundle, *, give_up_lease):
        first._held.discard(bundle)       # as _release does before its deletes
        raise StorageError("connection lost")

    monkeypatch.setattr(first, "_release", failing)
    with pytest.raises(StorageError):
        await first.split(bundle)
    monkeypatch.undo()
    assert await metadata.get(f"{LEASES}/{bundle.path}") is not None
    low, high = bundle.halves((bundle.lower + bundle.upper) // 2)
    await until(lambda: first.owns(low) and first.owns(high))
    assert await metadata.get(f"{LEASES}/{bundle.path}") is None


async def test_the_delayed_store_and_a_queue_go_on_through_a_split_of_their_bundle(brokers) -> None:
    """The bundle holding the namespace's delayed store and an AMQP queue is split: the store
    closes and starts again on the half holding it, the queue keeps its messages, and each held
    message is released into the queue once, whether held before or after the split."""
    (first, second), services = brokers
    store = partition_bundle("public", "default", DELAYED_TOPIC, 0)
    home = 0 if first.owns(store) else 1
    member, space = (first, second)[home], await services[home].namespace("public", "default")
    name = next(f"split{i}" for i in range(5000) if store.holds_partition("public", "default", queue_topic(f"split{i}"), 0))
    await space.declare_exchange("delays", ExchangeType.DELAYED, arguments={"x-delayed-type": "direct"})
    queue = await space.declare_queue(name)
    await space.bind(Binding("delays", name, DestinationKind.QUEUE, "k"))
    await queue.publish(Record(0, key=b"k", value=b"before"))
    now_ms = int(time.time() * 1000)
    await space.hold("delays", Record(0, key=b"k", value=b"held-before"), now_ms + 1000)

    await member.split(store)
    await until(lambda: member.owns(partition_bundle("public", "default", DELAYED_TOPIC, 0))
                and member.owns(space.queues[name].bundle))
    await space.hold("delays", Record(0, key=b"k", value=b"held-after"), now_ms + 1500)

    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 3 or time.monotonic() < deadline - 27:     # and a little longer: nothing twice
        message = await space.queue(name, "client").get("client", auto_ack=True)
        if message is not None:
            got.append(message.value)
        else:
            assert time.monotonic() < deadline, f"got so far: {got}"
            await asyncio.sleep(0.05)
    assert sorted(got) == [b"before", b"held-after", b"held-before"]


async def test_an_owner_whose_term_ended_cannot_split_nor_delete_the_next_owners_lease(brokers) -> None:
    """As after a pause past its session: its term on the bundle is gone and another broker holds
    the lease. A split it was making writes no layout (Fenced), and its release leaves that lease."""
    (first, _), services = brokers
    metadata = services[0]._core.metadata
    bundle = next(iter(sorted(first.held)))
    lease = f"{LEASES}/{bundle.path}"
    async with first._steps:     # no step of its own meanwhile, as while it was paused
        await metadata.delete(first.guard(bundle).path)      # the session's expiry took the term ...
        await metadata.delete(lease)                         # ... and the lease, which another took
        await metadata.create(lease, json.dumps({"broker": 9, "instance": "next-owner"}).encode())
        with pytest.raises(Fenced):
            await first._split(bundle, None)
        assert bundle in first.layouts.bundles("public", "default")
        assert await metadata.get(LAYOUTS) is None
        await first._release(bundle, give_up_lease=True)
        assert json.loads((await metadata.get(lease)).value)["instance"] == "next-owner"
    await metadata.delete(lease)

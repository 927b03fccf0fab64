"""Everything the Pulsar front end asks of the core, in one place.

The handlers never touch the core directly; they go through `CorePort`, so the core's interface can
be reshaped by changing this module alone. What it offers (docs/PULSAR.md, "The core port"):

    connection_opened/closed          register a client connection with the core (admin API, operators)
    partitions(topic)                 a topic's partition count, None if it does not exist
    ensure_topic(topic)               create it with one partition if missing, in an existing namespace
    owner(topic, index)               in a cluster, the Pulsar address of the partition's owner if not this broker
    on_bundle_released(callback)      hear when this broker gives up a bundle (in a cluster)
    release_bundle(bundle)            close the bundle's subscriptions; their consumers
    topics(tenant, namespace)         the namespace's topic names
    publish(topic, index, records)    append records as one batch; resolves to the first offset
    hold(topic, index, records, due)  keep records in the delayed store until due, then append it
    ends(topic, index)                (log start offset, high watermark)
    last_sequence(topic, index, p)    the highest sequence id producer `p` stored (dedup after a restart)
    subscribe(...)                    the shared subscription (core/queues) of a subscription name
    unsubscribe(...)                  delete a subscription's cursor
    seek(...)                         move a subscription to an offset (its consumers taken off it)
    offset_for_time(topic, index, t)  the first offset at or after a time
    release(...)                      close a subscription once its last consumer left

A subscription here is a core `SharedSubscription` on one partition with a cursor named
"pulsar.<escaped subscription name>", so it is the same kind of thing as an AMQP queue's.
"""

from __future__ import annotations

import asyncio

from core.cluster.bundles import partition_bundle
from core.connections import ClientConnection, peer_address
from core.delayed.held import Target
from core.delayed.service import PARTITION
from core.errors import CoreError, ExclusiveUse, NotOwner, TopicExists, UnknownTopic
from core.names import TopicName, escaped_name
from core.queues.log_records import data_records
from core.queues.policy import EXCLUSIVE, FAILOVER, KEY_SHARED, SHARED
from core.queues.subscription import SharedSubscription
from core.records.builder import Record, build_batch

CURSOR_PREFIX = "pulsar."
# A restarted gateway learns a producer's last sequence id from this many records at the end of
# the partition (its dedup state is not stored elsewhere).
DEDUP_SCAN_RECORDS = 10_000
_SCAN_BYTES = 1 << 20
TAKING_WAIT_S = 5.0

__all__ = ["CorePort", "CoreError", "ExclusiveUse", "EXCLUSIVE", "FAILOVER", "KEY_SHARED", "SHARED"]


class CorePort:
    def __init__(self, core) -> None:
        self._core = core
        self._subscriptions: dict[tuple[TopicName, int, str], SharedSubscription] = {}
        self._locks: dict[tuple[TopicName, int, str], asyncio.Lock] = {}

    @property
    def clock(self):
        return self._core.clock

    async def _partition(self, topic: TopicName, index: int):
        """The partition, open here; while this broker is assigned its bundle but still taking the
        lease, waited for (up to TAKING_WAIT_S) rather than refused, so a client sent here by a
        lookup is served instead of retrying against a NotOwner."""
        deadline = None
        while True:
            try:
                return await self._core.partition(topic, index)
            except NotOwner:
                cluster = self._core.cluster
                bundle = partition_bundle(topic.tenant, topic.namespace, topic.topic, index)
                owner = None if cluster is None else cluster.owner(bundle)
                loop = asyncio.get_running_loop()
                deadline = deadline or loop.time() + TAKING_WAIT_S
                if owner is None or owner.id != cluster.local.id or loop.time() >= deadline:
                    raise
                await asyncio.sleep(0.1)

    # --- connections --------------------------------------------------------------------------------

    def connection_opened(self, peer: object, close) -> object:
        """Register a client connection (the admin API lists it, an operator may close it)."""
        return self._core.connections.add(ClientConnection("pulsar", peer_address(peer), close))

    def connection_closed(self, connection) -> None:
        self._core.connections.remove(connection)

    # --- topics -----------------------------------------------------------------------------------

    async def partitions(self, topic: TopicName) -> int | None:
        try:
            return (await self._core.registry.get_topic(topic)).partitions
        except UnknownTopic:
            return None

    async def ensure_topic(self, topic: TopicName) -> int:
        count = await self.partitions(topic)
        if count is not None:
            return count
        try:     # only in a namespace that exists (UnknownTenant otherwise), as Pulsar's auto-creation
            return (await self._core.create_topic(topic, 1)).partitions
        except TopicExists:      # created meanwhile by another client
            return (await self._core.registry.get_topic(topic)).partitions

    def owner(self, topic: TopicName, index: int) -> str | None:
        """In a cluster, the Pulsar "host:port" of the broker the partition's bundle is assigned to,
        when that is another broker; None when it is this one, or unknown, or not a cluster."""
        cluster = self._core.cluster
        if cluster is None:
            return None
        bundle = partition_bundle(topic.tenant, topic.namespace, topic.topic, index)
        if cluster.owns(bundle):
            return None
        owner = cluster.owner(bundle)
        return owner.pulsar if owner is not None and owner.pulsar and owner.id != cluster.local.id else None

    def on_bundle_released(self, callback) -> None:
        """In a cluster, `await callback(bundle)` when this broker stops owning a bundle, before it
        lets go of it."""
        if self._core.cluster is not None:
            self._core.cluster.on_release(callback)

    @staticmethod
    def in_bundle(bundle, topic: TopicName, index: int) -> bool:
        return partition_bundle(topic.tenant, topic.namespace, topic.topic, index) == bundle

    async def release_bundle(self, bundle) -> list:
        """Close the subscriptions of the bundle's partitions (cursors saved while it still may);
        returns the consumers that were on them."""
        consumers = []
        for key in [key for key in self._subscriptions if self.in_bundle(bundle, key[0], key[1])]:
            async with self._locks.setdefault(key, asyncio.Lock()):
                subscription = self._subscriptions.pop(key, None)
                if subscription is None:
                    continue
                consumers += subscription.consumers
                try:
                    await subscription.close()
                except CoreError:
                    subscription.discard()     # the next owner starts from the last stored position
        return consumers

    async def topics(self, tenant: str, namespace: str) -> list[str]:
        return await self._core.registry.list_topics(tenant, namespace)

    # --- producing --------------------------------------------------------------------------------

    async def publish(self, topic: TopicName, index: int, records: list[Record]) -> int:
        partition = await self._partition(topic, index)
        return await partition.start_append(build_batch(records))

    async def hold(self, topic: TopicName, index: int, records: list[Record], due_ms: int) -> int:
        """Keep the records in the namespace's delayed store until `due_ms`; the first one's held id."""
        target = Target(PARTITION, f"{topic.topic}/{index}")
        held = [self._core.delayed.hold(topic.tenant, topic.namespace, record, due_ms, target) for record in records]
        return (await asyncio.gather(*held))[0]

    async def ends(self, topic: TopicName, index: int) -> tuple[int, int]:
        partition = await self._partition(topic, index)
        return partition.log_start_offset, partition.high_watermark

    async def offset_for_time(self, topic: TopicName, index: int, timestamp_ms: int) -> int:
        """The first offset whose record is not older than `timestamp_ms` (the end if none)."""
        partition = await self._partition(topic, index)
        found = await partition.offset_for_timestamp(timestamp_ms)
        return partition.high_watermark if found is None else found[0]

    async def last_sequence(self, topic: TopicName, index: int, producer: str, header: str,
                            sequence_header: str) -> int:
        """The highest sequence id among the partition's last DEDUP_SCAN_RECORDS records whose
        `header` is `producer`; -1 if none."""
        partition = await self._partition(topic, index)
        offset = max(partition.log_start_offset, partition.high_watermark - DEDUP_SCAN_RECORDS)
        wanted, highest = producer.encode("utf-8"), -1
        while offset < partition.high_watermark:
            result = await partition.read(offset, _SCAN_BYTES)
            records, next_offset = data_records(result.records)
            for record in records:
                headers = dict(record.headers)
                if headers.get(header) == wanted:
                    raw = headers.get(sequence_header) or b""
                    if raw.isdigit():
                        highest = max(highest, int(raw))
            if next_offset <= offset:
                break
            offset = next_offset
        return highest

    # --- subscriptions ----------------------------------------------------------------------------

    async def subscribe(self, topic: TopicName, index: int, name: str, subscription_type: str, *,
                        from_earliest: bool, start_offset: int | None = None) -> SharedSubscription:
        """The subscription `name` of the partition, of `subscription_type` (core/queues/policy.py);
        a new one starts at the log start (earliest), the end (latest) or `start_offset`.
        ExclusiveUse when it is open with another type and has consumers."""
        key = (topic, index, name)
        async with self._locks.setdefault(key, asyncio.Lock()):
            current = self._subscriptions.get(key)
            if current is not None:
                if current.subscription_type == subscription_type:
                    return current
                if current.consumers:
                    raise ExclusiveUse(f"subscription {name} is {current.subscription_type}, "
                                       f"not {subscription_type}, and has consumers")
                del self._subscriptions[key]
                await current.close()
            partition = await self._partition(topic, index)
            cursor = await self._core.cursor(topic, index, escaped_name(CURSOR_PREFIX, name),
                                             initial_offset=partition.log_start_offset)
            if not cursor.exists:
                if start_offset is not None:
                    first = start_offset
                else:
                    first = partition.log_start_offset if from_earliest else partition.high_watermark
                cursor.commit(min(max(partition.log_start_offset, first), partition.high_watermark))
                await cursor.flush()     # the position is the subscription's from its creation on
            core = self._core
            bundle = partition_bundle(topic.tenant, topic.namespace, topic.topic, index)
            subscription = SharedSubscription(
                lambda: core.partition(topic, index), cursor, core.clock, name=name,
                subscription_type=subscription_type,
                redelivered_below=cursor.maybe_delivered_below(partition.high_watermark),
                delete_consumed=lambda: core.delete_consumed(topic, index),
                lease=None if core.cluster is None else core.cluster.lease(bundle))
            subscription.note_high_watermark(partition.high_watermark)
            self._subscriptions[key] = subscription
            return subscription

    async def seek(self, topic: TopicName, index: int, name: str, offset: int) -> list:
        """Move the subscription to `offset`, forgetting its acknowledgements: its consumers are
        taken off it (returned; the caller tells their clients, which subscribe again) and the next
        subscribe starts there."""
        key = (topic, index, name)
        async with self._locks.setdefault(key, asyncio.Lock()):
            subscription = self._subscriptions.pop(key, None)
            consumers = []
            if subscription is not None:
                consumers = list(subscription.consumers)
                subscription.discard()
            cursor_name = escaped_name(CURSOR_PREFIX, name)
            await (await self._core.cursor(topic, index, cursor_name)).delete()
            partition = await self._partition(topic, index)
            cursor = await self._core.cursor(topic, index, cursor_name)
            cursor.commit(min(max(partition.log_start_offset, offset), partition.high_watermark))
            await cursor.flush()
            return consumers

    async def release(self, topic: TopicName, index: int, name: str) -> None:
        """Close the subscription if no consumer is left on it (its cursor is saved)."""
        key = (topic, index, name)
        async with self._locks.setdefault(key, asyncio.Lock()):
            subscription = self._subscriptions.get(key)
            if subscription is None or subscription.consumers:
                return
            del self._subscriptions[key]
            await subscription.close()

    async def unsubscribe(self, topic: TopicName, index: int, name: str) -> None:
        key = (topic, index, name)
        async with self._locks.setdefault(key, asyncio.Lock()):
            subscription = self._subscriptions.pop(key, None)
            if subscription is not None:
                subscription.discard()
                await subscription.cursor.delete()
                return
            cursor = await self._core.cursor(topic, index, escaped_name(CURSOR_PREFIX, name))
            await cursor.delete()

    async def close(self) -> None:
        subscriptions, self._subscriptions = list(self._subscriptions.values()), {}
        for subscription in subscriptions:
            await subscription.close()

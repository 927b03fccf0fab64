"""A queue: a topic with one partition, one shared subscription on it, and a batching publisher.

    /queues/<tenant>/<namespace>/<storage key of the name>
        {"name": str, "topic": str, "durable": bool, "exclusive": bool, "auto_delete": bool,
         "arguments": {...}, "owns_topic": bool}

The messages are the records of the topic (partition 0); the queue's position is the cursor named
CURSOR_NAME on it. An exclusive queue belongs to one owner (an AMQP connection) and is never stored
across a restart; neither is a non-durable one (both are deleted when their namespace is loaded).
A durable queue loaded after a restart drops its transient messages before it hands anything out
(core/queues/restart.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from core.clock import Clock
from core.cluster.bundles import Bundle, partition_bundle
from core.delayed.held import Target
from core.names import TopicName
from core.partition import Partition
from core.queues import arguments as stored_arguments
from core.queues.dead_letter import DeadLetterer
from core.queues.expiry import ExpirySweeper, UnusedQueueTimer
from core.queues.forwarding import RemotePublisher, remote_counts
from core.queues.limits import LengthLimit
from core.queues.policy import QueuePolicy
from core.queues.publisher import BatchPublisher
from core.queues.remote_subscription import RemoteSubscription
from core.queues.restart import drop_transient
from core.queues.interface import Consumer
from core.queues.message import QueuedMessage
from core.queues.subscription import SharedSubscription
from core.records.builder import Record

log = logging.getLogger("gateway.core.queues")

REQUEUE_TARGET = "queue"     # the kind of delayed-message target a requeue-delayed message is held for

CURSOR_NAME = "queue"

# The settings of a topic created for a queue: messages stay until consumed, by the queue and by
# any other subscription (a Kafka group) of the topic (core/retention.py), messages up to the AMQP
# maximum fit, and ledgers roll small enough that consumed data is reclaimed soon. A queue over a
# topic that existed before (a Kafka one) keeps that topic's settings: its acks delete nothing.
QUEUE_TOPIC_CONFIGS = {
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "retention.consumed": "true",
    "max.message.bytes": str(256 << 20),
    "segment.bytes": str(64 << 20),
}


@dataclass(frozen=True, slots=True)
class QueueInfo:
    name: str
    topic: str
    durable: bool = True
    exclusive: bool = False
    auto_delete: bool = False
    arguments: Mapping[str, Any] = field(default_factory=dict)
    owns_topic: bool = True      # False: declared over a topic that existed (kept when the queue goes)
    declared_by: str = ""        # a transient queue's broker process (cluster): it goes with that process

    @property
    def transient(self) -> bool:
        return self.exclusive or not self.durable

    def to_doc(self) -> dict[str, Any]:
        doc = {"name": self.name, "topic": self.topic, "durable": self.durable, "exclusive": self.exclusive,
               "auto_delete": self.auto_delete, "arguments": stored_arguments.to_json(self.arguments),
               "owns_topic": self.owns_topic}
        if self.declared_by:
            doc["declared_by"] = self.declared_by
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> "QueueInfo":
        return cls(doc["name"], doc["topic"], doc["durable"], doc["exclusive"], doc["auto_delete"],
                   stored_arguments.from_json(doc["arguments"]), doc.get("owns_topic", True),
                   doc.get("declared_by", ""))


class Queue:
    """The live side of a declared queue. `open()` loads the cursor before anything is consumed;
    publishing needs no open."""

    def __init__(self, core, info: QueueInfo, topic: TopicName, clock: Clock, *, owner: Hashable | None = None,
                 restored: bool = False, policy: QueuePolicy | None = None) -> None:
        self._core = core
        self.info = info
        self.topic = topic
        self.owner = owner                    # the exclusive owner, if exclusive
        self._clock = clock
        self.publisher = BatchPublisher(self.partition, on_durable=self._on_durable,
                                        deliver_first=self._deliver_durable, open_partition=self.open_partition)
        self.subscription: SharedSubscription | None = None
        self._opening: asyncio.Future | None = None
        self.had_consumers = False            # auto-delete applies only once someone consumed
        self.deleted = False
        # Restored from the store by this process: the high watermark before this process appends
        # anything (found on first use) bounds what an earlier process wrote.
        self._restored = restored
        self._earlier_end: int | None = None
        # TTL, dead-lettering and limits (core/queues/policy.py); dead_letters and unused_timer are
        # set by the namespace, which routes the dead messages and deletes an expired queue.
        self.policy = policy or QueuePolicy.of(info.name, info.arguments, durable=info.durable,
                                               exclusive=info.exclusive, auto_delete=info.auto_delete)
        namespace_ttl = core.meters.of(topic.tenant, topic.namespace).policies.message_ttl_ms
        if self.policy.message_ttl_ms is None and namespace_ttl is not None:   # the namespace's default
            self.policy = replace(self.policy, message_ttl_ms=namespace_ttl)
        self.length_limit = LengthLimit(self) if self.policy.limits_length else None
        self.dead_letters: DeadLetterer | None = None
        self.unused_timer: UnusedQueueTimer | None = None
        self._sweeper: ExpirySweeper | None = None
        self._sweep_wanted = False
        self._last_partition: Partition | None = None
        self._remote: RemotePublisher | None = None    # publishes while another broker serves it
        self._remote_consumers = 0                     # its consumers there, as last asked

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def bundle(self) -> Bundle:
        """The bundle whose owner serves the queue (it changes when that bundle is split)."""
        return partition_bundle(self.topic.tenant, self.topic.namespace, self.topic.topic, 0)

    @property
    def name(self) -> str:
        return self.info.name

    def open_partition(self) -> Partition | None:
        """The queue's partition if the core has it open now (None: `partition` is needed)."""
        if self._earlier_end is None:
            return None      # never opened through `partition` yet
        partition = self._core.open_partition(self.topic, 0)
        if partition is not None:
            self._last_partition = partition
        return partition

    async def partition(self) -> Partition:
        # Always through the core: it reopens a partition that it closed while idle.
        partition = await self._core.partition(self.topic, 0)
        self._last_partition = partition
        if self._earlier_end is None:
            self._earlier_end = partition.high_watermark if self._restored else 0
        return partition

    async def open(self) -> "SharedSubscription | RemoteSubscription":
        if self.subscription is not None:
            return self.subscription
        if not self.served_here and self._core.peers is not None:
            self.subscription = RemoteSubscription(self._core, self)   # consumed through the owner
            return self.subscription
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._load())
        try:
            return await asyncio.shield(self._opening)
        except BaseException:
            if self._opening is not None and self._opening.done():
                self._opening = None
            raise

    async def _load(self) -> SharedSubscription:
        partition = await self.partition()
        cursor = await self._core.cursor(self.topic, 0, CURSOR_NAME, initial_offset=partition.log_start_offset)
        if self._earlier_end:
            await drop_transient(partition, cursor, self._earlier_end)
            await cursor.flush()
        policy = self.policy
        dead_letters = self.dead_letters if policy.dead_letter_exchange is not None else None
        dead_letter = dead_letters.send if dead_letters is not None else None
        subscription = SharedSubscription(
            self.partition, cursor, self._clock, name=self.info.name, max_priority=policy.max_priority,
            subscription_type=policy.subscription_type, group_poison_policy=policy.group_poison_policy,
            redelivered_below=cursor.maybe_delivered_below(self._earlier_end),
            message_ttl_ms=policy.message_ttl_ms, delivery_limit=policy.delivery_limit, dead_letter=dead_letter,
            delete_consumed=lambda: self._core.delete_consumed(self.topic, 0),
            lease=None if self._core.cluster is None else self._core.cluster.lease(self.bundle))
        subscription.note_high_watermark(partition.high_watermark)
        if policy.message_ttl_ms is not None or policy.dead_letter_exchange is not None or self._sweep_wanted:
            self._sweeper = ExpirySweeper(subscription, self._clock, self.name)
        if policy.requeue_delay_ms:
            subscription.requeue_later = self._requeue_later
        self.subscription = subscription
        return subscription

    def _requeue_later(self, messages: list, acknowledge: Callable[[list[int]], None],
                       put_back: Callable[[list[int]], None]) -> None:
        """x-requeue-delay: hold requeued messages (core/delayed) for the queue's delay, then they
        come back at its tail; acknowledged here once held, put back at once if holding fails."""
        offsets = [message.offset for message in messages]
        due_ms = self._clock.now_ms() + self.policy.requeue_delay_ms
        topic = self.topic
        try:
            held = [self._core.delayed.hold(topic.tenant, topic.namespace,
                                            Record(message.timestamp_ms, message.key, message.value, message.headers),
                                            due_ms, Target(REQUEUE_TARGET, self.name))
                    for message in messages]
        except Exception as exc:
            log.warning("holding requeued messages of queue %s failed: %s", self.name, exc)
            put_back(offsets)
            return

        def done(gathered: asyncio.Future) -> None:
            if gathered.cancelled() or gathered.exception() is not None:
                put_back(offsets)
            else:
                acknowledge(offsets)

        asyncio.gather(*held).add_done_callback(done)

    def expect_expiring(self) -> None:
        """Messages with their own expiry are published here: keep removing expired heads even
        while nobody consumes (queues with a TTL or a dead-letter exchange always do)."""
        if self._sweeper is not None or self._sweep_wanted or self.deleted or not self.served_here:
            return
        self._sweep_wanted = True
        if self.subscription is not None:
            self._sweeper = ExpirySweeper(self.subscription, self._clock, self.name)
        else:
            opening = asyncio.ensure_future(self.open())
            opening.add_done_callback(lambda done: done.cancelled() or done.exception())

    @property
    def intake(self) -> "BatchPublisher | RemotePublisher":
        """What this broker's publishes to the queue wait on for room (`writable`, `wait_writable`):
        its publisher, or the link to the broker serving it."""
        return self._remote if self._remote is not None and not self.served_here else self.publisher

    @property
    def served_here(self) -> bool:
        """This broker serves the queue (in a cluster: owns its bundle)."""
        cluster = self._core.cluster
        return cluster is None or cluster.owns(self.bundle)

    # --- publishing -----------------------------------------------------------------------------

    def publish(self, record: Record) -> asyncio.Future:
        if not self.served_here:
            return self._forwarded().publish(record)
        if self.length_limit is not None:
            return self.length_limit.publish(record)
        return self.publisher.publish(record)

    def publish_batch(self, records: list[Record]) -> asyncio.Future:
        """Store `records` all together or not at all (an AMQP transaction's, at commit)."""
        if not self.served_here:
            return self._forwarded().publish_batch(records)
        return self.publisher.publish_batch(records)

    def _forwarded(self) -> RemotePublisher:
        """Publishes go to the broker serving the queue (refused now, not nacked later, when there
        are no peer links)."""
        if self._core.peers is None:
            raise self._core.not_owner(self.topic, 0)
        if self._remote is None:
            self._remote = RemotePublisher(self._core, self)
        return self._remote

    def _deliver_durable(self, base_offset: int, records: list[Record]) -> asyncio.Future | None:
        """A batch is durable: a future done once its messages were handed to the consumers with
        room (None: no consumers, or handed to them already)."""
        subscription, partition = self.subscription, self._last_partition
        if subscription is None or partition is None:
            return None
        end = partition.high_watermark
        subscription.note_high_watermark(end)
        if subscription.hand_out_appended(partition, base_offset, records):
            return None
        return subscription.read_up_to(end)

    def _on_durable(self) -> None:
        subscription = self.subscription
        if subscription is not None:
            if self._last_partition is not None:
                subscription.note_high_watermark(self._last_partition.high_watermark)
            subscription.wake()
            if self.length_limit is not None:
                self.length_limit.durable()
            if self._sweeper is not None:
                self._sweeper.wake()

    # --- consuming ------------------------------------------------------------------------------

    async def add_consumer(self, consumer: Consumer, *, exclusive: bool = False) -> None:
        subscription = await self.open()
        if isinstance(subscription, RemoteSubscription):
            await subscription.add_consumer(consumer, exclusive=exclusive)
        else:
            subscription.add_consumer(consumer, exclusive=exclusive)
        self.had_consumers = True

    @property
    def consumer_count(self) -> int:
        if not self.served_here and self._core.peers is not None:
            return self._remote_consumers       # as the owner counted them when last asked
        return len(self.subscription.consumers) if self.subscription is not None else 0

    async def get(self, owner: Hashable, *, auto_ack: bool) -> QueuedMessage | None:
        self.touch()
        return await (await self.open()).get(owner, auto_ack=auto_ack)

    async def message_count(self) -> int:
        if not self.served_here and self._core.peers is not None:
            count, self._remote_consumers = await remote_counts(self._core, self)
            return count
        subscription = await self.open()
        subscription.note_high_watermark((await self.partition()).high_watermark)
        return subscription.ready_count

    async def purge(self) -> int:
        subscription = await self.open()
        if isinstance(subscription, RemoteSubscription):
            return await subscription.purge()
        subscription.note_high_watermark((await self.partition()).high_watermark)
        return subscription.purge()

    def touch(self) -> None:
        """Used (basic.get, a redeclare, a consumer leaving): x-expires counts from now."""
        if self.unused_timer is not None:
            self.unused_timer.touch()

    def _stop_background(self) -> None:
        for part in (self._sweeper, self.length_limit, self.unused_timer, self.dead_letters):
            if part is not None:
                part.close()

    async def close(self) -> None:
        self._stop_background()
        if self.subscription is not None:
            await self.subscription.close()

    def discard(self) -> None:
        self.deleted = True
        self._stop_background()
        if self.subscription is not None:
            self.subscription.discard()

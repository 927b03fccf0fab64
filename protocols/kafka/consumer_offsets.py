"""Kafka's internal `__consumer_offsets` topic, kept as a log of what the group coordinator stores.

Committed offsets live in core cursors (core/groups/store.py); lag monitors (Burrow, kminion,
kafka-lag-exporter) instead consume `__consumer_offsets`. So every commit, deletion and settled
group generation of a tenant/namespace is also appended, in Kafka's own record formats, to that
namespace's `__consumer_offsets` (50 partitions, Kafka's offsets.topic.num.partitions; a group's
records go to partition abs(Java hashCode(group id)) % 50, as Kafka places them). It is created on
the namespace's first FindCoordinator for a group (as Kafka creates it) or first commit. Clients may
read it; Metadata lists it as internal, and producing to it is refused (INVALID_TOPIC_EXCEPTION) as
Kafka refuses it. An admin may delete it, as in Kafka; it is created again on the next change.

Record formats (big-endian; strings int16 length + UTF-8, nullable -1; bytes int32 length):
    offset commit   key   v1: version int16=1, group string, topic string, partition int32
                    value v3: version int16=3, offset int64, leader_epoch int32, metadata string,
                              commit_timestamp int64                      (null value: deleted)
    group metadata  key   v2: version int16=2, group string
                    value v3: version int16=3, protocol_type string, generation int32,
                              protocol string?, leader string?, current_state_timestamp int64,
                              members [int32 count] of: member_id string, group_instance_id string?,
                              client_id string, client_host string, rebalance_timeout int32,
                              session_timeout int32, subscription bytes, assignment bytes
                                                                          (null value: group deleted)

The topic is derived data, written after the cursor it mirrors is durable and never read back by
the gateway: a crash in between loses a record of it, not the commit. It is not compacted, so
records leave it by retention like any topic's (7 days, as offsets.retention.minutes).

One task appends, in the order the coordinator reported the changes.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Mapping, Sequence

from core.errors import CoreError, TopicExists, UnknownTopic
from core.groups.group import MembershipGroup
from core.groups.store import GroupKey, TopicPartition
from core.groups.values import OffsetAndMetadata
from core.names import TopicName
from core.partition import Partition
from core.records.builder import Record, build_batch
from core.service import Core

log = logging.getLogger("gateway.kafka")

TOPIC = "__consumer_offsets"
PARTITIONS = 50
INTERNAL_TOPICS = frozenset({TOPIC})
_QUEUE_LIMIT = 100_000   # changes waiting to be written; beyond it they are dropped (and logged)


def partition_for(group_id: str) -> int:
    """Kafka's placement: abs(String.hashCode) mod the partition count."""
    utf16 = group_id.encode("utf-16-be")
    h = 0
    for unit in struct.unpack(f">{len(utf16) // 2}H", utf16):
        h = (31 * h + unit) & 0xFFFFFFFF
    return (h & 0x7FFFFFFF) % PARTITIONS


def _string(text: str | None) -> bytes:
    if text is None:
        return b"\xff\xff"
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _bytes(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def offset_commit_key(group_id: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", 1) + _string(group_id) + _string(topic) + struct.pack(">i", partition)


def offset_commit_value(committed: OffsetAndMetadata, timestamp_ms: int) -> bytes:
    return (struct.pack(">hqi", 3, committed.offset, committed.leader_epoch) + _string(committed.metadata)
            + struct.pack(">q", timestamp_ms))


def group_metadata_key(group_id: str) -> bytes:
    return struct.pack(">h", 2) + _string(group_id)


def group_metadata_value(group: MembershipGroup, timestamp_ms: int) -> bytes:
    members = list(group.members.values())
    out = [struct.pack(">h", 3), _string(group.protocol_type or ""), struct.pack(">i", group.generation),
           _string(group.protocol_name), _string(group.leader_id), struct.pack(">qi", timestamp_ms, len(members))]
    for member in members:
        subscription = member.metadata(group.protocol_name) if group.protocol_name in member.protocol_names else b""
        out += [_string(member.member_id), _string(member.instance_id), _string(member.client_id),
                _string(member.client_host), struct.pack(">ii", member.rebalance_timeout_ms, member.session_timeout_ms),
                _bytes(subscription), _bytes(member.assignment)]
    return b"".join(out)


class ConsumerOffsetsLog:
    """The coordinator's observer (core/groups/coordinator.py GroupObserver) writing the topic."""

    def __init__(self, core: Core) -> None:
        self._core = core
        self._queue: asyncio.Queue[tuple[GroupKey, list[Record]]] = asyncio.Queue(_QUEUE_LIMIT)
        self._writer: asyncio.Task | None = None
        self._ready: set[tuple[str, str]] = set()   # (tenant, namespace) whose topic exists

    def close(self) -> None:
        if self._writer is not None:
            self._writer.cancel()

    # --- GroupObserver ------------------------------------------------------------------------

    def offsets_committed(self, key: GroupKey, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                          timestamp_ms: int) -> None:
        self._put(key, [Record(timestamp_ms, offset_commit_key(key.group_id, topic, index),
                               offset_commit_value(committed, timestamp_ms))
                        for (topic, index), committed in offsets.items()])

    def offsets_deleted(self, key: GroupKey, partitions: Sequence[TopicPartition]) -> None:
        now = self._core.clock.now_ms()
        self._put(key, [Record(now, offset_commit_key(key.group_id, topic, index)) for topic, index in partitions])

    def group_settled(self, key: GroupKey, group: MembershipGroup) -> None:
        now = self._core.clock.now_ms()
        self._put(key, [Record(now, group_metadata_key(key.group_id), group_metadata_value(group, now))])

    def group_deleted(self, key: GroupKey) -> None:
        self._put(key, [Record(self._core.clock.now_ms(), group_metadata_key(key.group_id))])

    # --- writing ------------------------------------------------------------------------------

    async def ensure_topic(self, tenant: str, namespace: str) -> TopicName:
        """The namespace's __consumer_offsets, created on first use (as Kafka creates it on the
        first FindCoordinator for a group)."""
        name = TopicName.of(TOPIC, tenant, namespace)
        if (tenant, namespace) not in self._ready:
            try:
                await self._core.create_topic(name, PARTITIONS)
            except TopicExists:
                pass
            self._ready.add((tenant, namespace))
        return name

    async def _partition(self, key: GroupKey) -> Partition:
        topic = await self.ensure_topic(key.tenant, key.namespace)
        try:
            return await self._core.partition(topic, partition_for(key.group_id))
        except UnknownTopic:   # deleted by an admin (Kafka lets them): create it again
            self._ready.discard((key.tenant, key.namespace))
            return await self._core.partition(await self.ensure_topic(key.tenant, key.namespace),
                                              partition_for(key.group_id))

    def _put(self, key: GroupKey, records: list[Record]) -> None:
        if not records:
            return
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write_forever(), name="consumer-offsets")
        try:
            self._queue.put_nowait((key, records))
        except asyncio.QueueFull:
            log.warning("%s: %d changes waiting; a change of group %s is not recorded", TOPIC,
                        self._queue.qsize(), key.group_id)

    async def _write_forever(self) -> None:
        while True:
            key, records = await self._queue.get()
            try:
                partition = await self._partition(key)
                # Queued now, in order; durability is awaited by nobody: the cursors are the record.
                written = partition.start_append(build_batch(records))
                asyncio.ensure_future(written).add_done_callback(_log_failure)
            except CoreError as exc:
                log.warning("%s: a change of group %s is not recorded: %s", TOPIC, key.group_id, exc)
            except Exception:   # a bug must not stop the log for every later change
                log.exception("%s: recording a change of group %s failed", TOPIC, key.group_id)


def _log_failure(written: asyncio.Future) -> None:
    if not written.cancelled() and written.exception() is not None:
        log.warning("%s: a record was not stored: %s", TOPIC, written.exception())

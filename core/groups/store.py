"""What survives a restart of a group: its committed offsets and a record of where they are.

Each committed offset is a core cursor on its partition, named after the group (naming.py), with
the offset as its position and the commit's metadata string. The group's coordinator writes them, as
the owner of the group's bundle (Core.owner_metadata: a coordinator that lost the bundle cannot). Next to them, one record per group:

    /groups/<tenant>/<namespace>/<stored name>   {"protocol_type": str | null,
                                                   "partitions": {topic: [partition, ...]},
                                                   "group_type": "consumer", "group_epoch": int}

listing the partitions the group has committed on, so "all offsets of a group" and "every group of
a namespace" need no scan of the topics. The record is written before the cursors it lists, so it
may name a cursor that does not exist (a crash in between, a deleted topic); such entries read as
"no offset". Members, generations and assignments are not stored: after a restart a group is
Empty and its members join again. The last two keys mark a consumer-protocol (KIP-848) group,
stored as soon as it has members and whenever its epoch moves, so that after a restart its members
find it (they join again, and its epochs go on from the stored one).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from core.cluster.bundles import group_bundle
from core.cursor import Cursor
from core.errors import InvalidName, NotCoordinator
from core.groups.naming import group_id_of, storage_name
from core.groups.values import OffsetAndMetadata
from core.names import TopicName
from core.partition import storage_errors
from core.service import Core
from storage.api import Fenced, MetadataStore, NoNode

TopicPartition = tuple[str, int]   # a topic of the group's namespace, and a partition index

T = TypeVar("T")


def _core_errors(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Storage failures leave the store as the core's errors (StorageUnavailable, ...); a write this
    broker may no longer make as the group's coordinator as NotCoordinator."""
    @functools.wraps(method)
    async def translated(*args, **kwargs) -> T:
        with storage_errors():
            try:
                return await method(*args, **kwargs)
            except Fenced as exc:
                raise NotCoordinator(str(exc)) from exc
    return translated


@dataclass(frozen=True, slots=True, order=True)
class GroupKey:
    tenant: str
    namespace: str
    group_id: str


@dataclass(slots=True)
class GroupRecord:
    protocol_type: str | None = None
    partitions: dict[str, set[int]] = field(default_factory=dict)
    stored: bool = False
    group_type: str | None = None      # "consumer": a consumer-protocol group; None: classic
    group_epoch: int = 0

    def covers(self, partitions: Iterable[TopicPartition]) -> bool:
        return all(index in self.partitions.get(topic, ()) for topic, index in partitions)

    def topic_partitions(self) -> list[TopicPartition]:
        return [(topic, index) for topic in sorted(self.partitions) for index in sorted(self.partitions[topic])]

    def to_json(self) -> bytes:
        doc: dict = {"protocol_type": self.protocol_type,
                     "partitions": {t: sorted(p) for t, p in sorted(self.partitions.items())}}
        if self.group_type is not None:
            doc |= {"group_type": self.group_type, "group_epoch": self.group_epoch}
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "GroupRecord":
        doc = json.loads(raw)
        return cls(doc.get("protocol_type"), {t: set(p) for t, p in doc.get("partitions", {}).items()}, True,
                   doc.get("group_type"), doc.get("group_epoch", 0))


class GroupStore:
    """Owned by the event loop. Record updates are serialized; cursor writes need not be (each
    cursor is one group's position on one partition, and the last commit wins, as in Kafka)."""

    def __init__(self, core: Core) -> None:
        self._core = core
        self._metadata = core.metadata
        self._record_lock = asyncio.Lock()

    @staticmethod
    def record_path(key: GroupKey) -> str:
        return f"/groups/{key.tenant}/{key.namespace}/{storage_name(key.group_id)}"

    @_core_errors
    async def load(self, key: GroupKey) -> GroupRecord | None:
        node = await self._metadata.get(self.record_path(key))
        return None if node is None else GroupRecord.from_json(node.value)

    @_core_errors
    async def stored_group_ids(self, tenant: str, namespace: str) -> list[str]:
        names = await self._metadata.children(f"/groups/{tenant}/{namespace}")
        return [group_id for group_id in map(group_id_of, names) if group_id is not None]

    @_core_errors
    async def commit(self, key: GroupKey, record: GroupRecord, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                     protocol_type: str | None) -> None:
        """Store the offsets; durable when it returns."""
        async with self._record_lock:
            new_type = protocol_type is not None and protocol_type != record.protocol_type
            if new_type or not record.stored or not record.covers(offsets):
                if new_type:
                    record.protocol_type = protocol_type
                for topic, index in offsets:
                    record.partitions.setdefault(topic, set()).add(index)
                await self._writer(key).put(self.record_path(key), record.to_json())
                record.stored = True

        async def write(tp: TopicPartition, committed: OffsetAndMetadata) -> None:
            cursor = await self._cursor(key, self._topic(key, tp[0]), tp[1])
            cursor.commit(committed.offset, committed.metadata, committed.leader_epoch)
            await cursor.flush()

        await asyncio.gather(*(write(tp, committed) for tp, committed in offsets.items()))

    @_core_errors
    async def save(self, key: GroupKey, record: GroupRecord) -> None:
        """Store the record as it is now (its group's type and epoch); durable when it returns."""
        async with self._record_lock:
            await self._writer(key).put(self.record_path(key), record.to_json())
            record.stored = True

    @_core_errors
    async def fetch(self, key: GroupKey, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata | None]:

        async def read(tp: TopicPartition) -> OffsetAndMetadata | None:
            try:
                topic = self._topic(key, tp[0])
            except InvalidName:
                return None
            cursor = await self._cursor(key, topic, tp[1])
            return (OffsetAndMetadata(cursor.committed_offset, cursor.metadata, cursor.leader_epoch)
                    if cursor.exists else None)

        wanted = list(dict.fromkeys(partitions))
        found = await asyncio.gather(*(read(tp) for tp in wanted))
        return dict(zip(wanted, found))

    @_core_errors
    async def stored_keys(self) -> list[GroupKey]:
        """Every group with a stored record, in every tenant and namespace."""
        keys = []
        registry = self._core.registry
        for tenant in await registry.tenants():
            for namespace in await registry.namespaces(tenant):
                keys += [GroupKey(tenant, namespace, group_id)
                         for group_id in await self.stored_group_ids(tenant, namespace)]
        return keys

    @_core_errors
    async def last_commit_ms(self, key: GroupKey, record: GroupRecord) -> int:
        """When the newest of the group's committed offsets was committed (0: none is stored)."""
        newest = 0
        for topic, index in record.topic_partitions():
            try:
                cursor = await self._cursor(key, self._topic(key, topic), index)
            except InvalidName:
                continue
            newest = max(newest, cursor.updated_ms)
        return newest

    @_core_errors
    async def delete(self, key: GroupKey, record: GroupRecord, partitions: Iterable[TopicPartition]) -> None:
        """Forget the offsets of `partitions`; the record goes once it lists nothing."""
        doomed = [tp for tp in dict.fromkeys(partitions) if tp[1] in record.partitions.get(tp[0], ())]
        for topic, index in doomed:
            cursor = await self._cursor(key, self._topic(key, topic), index)
            await cursor.delete()
        async with self._record_lock:
            for topic, index in doomed:
                left = record.partitions.get(topic)
                if left is not None:
                    left.discard(index)
                    if not left:
                        del record.partitions[topic]
            if not record.stored:
                return
            if record.partitions:
                await self._writer(key).put(self.record_path(key), record.to_json())
            else:
                await self._forget(key, record)

    @_core_errors
    async def delete_all(self, key: GroupKey, record: GroupRecord) -> None:
        await self.delete(key, record, record.topic_partitions())
        async with self._record_lock:
            await self._forget(key, record)

    async def _forget(self, key: GroupKey, record: GroupRecord) -> None:
        try:
            await self._writer(key).delete(self.record_path(key))
        except NoNode:
            pass
        record.stored = False

    def _writer(self, key: GroupKey) -> MetadataStore:
        return self._core.owner_metadata(group_bundle(key.tenant, key.namespace, key.group_id))

    async def _cursor(self, key: GroupKey, topic: TopicName, index: int) -> Cursor:
        return await self._core.cursor(topic, index, storage_name(key.group_id),
                                       writer=group_bundle(key.tenant, key.namespace, key.group_id))

    @staticmethod
    def _topic(key: GroupKey, topic: str) -> TopicName:
        return TopicName.of(topic, key.tenant, key.namespace)

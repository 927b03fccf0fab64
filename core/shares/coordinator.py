"""Share groups of every tenant/namespace: their membership and their share partitions.

Membership (share_group.py) lives in memory: members that find it gone after a restart join again.
Share partitions (share_partition.py) are opened on first use from their cursors, where their
acknowledgements are persisted, so a restart loses none. In a cluster a share partition is served
only by the owner of its partition (others answer NotOwner, as for the partition itself) and is
forgotten when the partition's bundle goes: the new owner opens it from the cursor, so records one
broker had handed out are available again there, as after a restart. A share partition without a cursor starts
at the partition's end (`auto_offset_reset` "latest", Kafka's default for share.auto.offset.reset)
or at its start ("earliest").

A group id names one group of one kind: the caller says (through `other_kind`) whether a classic or
consumer group holds the id, and then a share heartbeat is refused with GroupNotFound, as Kafka
answers GROUP_ID_NOT_FOUND; the other way round, `active` tells the group coordinator that a share
group with members holds an id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from core.cluster.bundles import Bundle
from core.errors import GroupNotFound, InvalidGroupId, InvalidName, UnknownTopic
from core.groups.store import GroupKey
from core.groups.values import GroupOverview
from core.names import MAX_NAME, TopicName, escaped_name
from core.service import Core
from core.shares.share_group import ShareAnswer, ShareGroup
from core.shares.share_partition import EARLIEST, LATEST, SharePartition

CURSOR_PREFIX = "share."
SHARE_GROUP_TYPE = "share"     # the group's type and protocol type, as Kafka names them


@dataclass(frozen=True, slots=True)
class ShareSettings:
    record_lock_duration_ms: int = 30_000     # group.share.record.lock.duration.ms
    delivery_count_limit: int = 5             # group.share.delivery.count.limit
    session_timeout_ms: int = 45_000          # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000        # group.share.heartbeat.interval.ms
    auto_offset_reset: str = LATEST           # share.auto.offset.reset: "latest" or "earliest"
    max_size: int = 200                       # group.share.max.size


def cursor_name(group_id: str) -> str:
    name = escaped_name(CURSOR_PREFIX, group_id)
    if len(name) > MAX_NAME:
        raise InvalidGroupId(f"group id {group_id[:40]!r}... is too long to store ({len(name)} > {MAX_NAME})")
    return name


class ShareCoordinator:
    def __init__(self, core: Core, settings: ShareSettings | None = None,
                 other_kind: Callable[[GroupKey], Awaitable[bool]] | None = None) -> None:
        self._core = core
        self.settings = settings or ShareSettings()
        self._other_kind = other_kind
        self._groups: dict[GroupKey, ShareGroup] = {}
        self._partitions: dict[tuple[GroupKey, TopicName, int], SharePartition] = {}
        self._opening: dict[tuple[GroupKey, TopicName, int], asyncio.Future] = {}
        if core.cluster is not None:
            core.cluster.on_release(self._forget_bundle)

    def group(self, key: GroupKey) -> ShareGroup | None:
        return self._groups.get(key)

    def active(self, key: GroupKey) -> bool:
        """Whether a share group with members holds the id."""
        group = self._groups.get(key)
        return group is not None and bool(group.members)

    async def heartbeat(self, key: GroupKey, *, member_id: str, epoch: int, topics: Sequence[str] | None,
                        rack: str | None, client_id: str, client_host: str) -> tuple[ShareAnswer, dict[str, str]]:
        """A ShareGroupHeartbeat; returns the answer and the id (hex) of every topic it assigns."""
        if not key.group_id:
            raise InvalidGroupId("the group id must not be empty")
        cursor_name(key.group_id)
        group = self._groups.get(key)
        if group is None:
            if self._other_kind is not None and await self._other_kind(key):
                raise GroupNotFound(f"group {key.group_id} is not a share group")
            group = self._groups.setdefault(key, ShareGroup(key.group_id, self._core.clock,
                                                            self.settings.session_timeout_ms,
                                                            self.settings.max_size))
        self._expire(key, group)
        wanted = set(topics or ()) | (group.members[member_id].topics if member_id in group.members else set())
        infos = {}
        for topic in sorted(wanted):
            try:
                infos[topic] = await self._core.registry.get_topic(TopicName.of(topic, key.tenant, key.namespace))
            except (UnknownTopic, InvalidName):
                continue
        answer = group.heartbeat(member_id=member_id, epoch=epoch, topics=None if topics is None else list(topics),
                                 rack=rack, client_id=client_id, client_host=client_host,
                                 partitions={t: info.partitions for t, info in infos.items()})
        if epoch == -1:
            self.release_member(key, member_id)
        return answer, {t: info.topic_id for t, info in infos.items()}

    async def share_partition(self, key: GroupKey, topic: TopicName, index: int) -> SharePartition:
        """The share partition of the group on topic/index, opened from its cursor on first use."""
        ident = (key, topic, index)
        found = self._partitions.get(ident)
        if found is not None:
            if self._core.cluster is not None:
                await self._core.partition(topic, index)   # NotOwner once its bundle went elsewhere
            return found
        opening = self._opening.get(ident)
        if opening is not None:
            return await asyncio.shield(opening)
        future = self._opening[ident] = asyncio.get_running_loop().create_future()
        try:
            partition = await self._core.partition(topic, index)
            start = partition.log_start_offset if self.settings.auto_offset_reset == EARLIEST \
                else partition.high_watermark
            cursor = await self._core.cursor(topic, index, cursor_name(key.group_id), initial_offset=start)
            if not cursor.exists:
                cursor.commit(start)
                await cursor.flush()     # the start is fixed once: records from here are the group's
            share = SharePartition(lambda: self._core.partition(topic, index), cursor, self._core.clock,
                                   lock_ms=self.settings.record_lock_duration_ms,
                                   delivery_limit=self.settings.delivery_count_limit)
            self._partitions[ident] = share
            future.set_result(share)
            return share
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()      # retrieved: waiters re-raise it themselves
            raise
        finally:
            del self._opening[ident]

    async def _forget_bundle(self, bundle: Bundle) -> None:
        # Nothing to save: acknowledgements are durable in the cursor before they are answered.
        for ident in [i for i in self._partitions
                      if bundle.holds_partition(i[1].tenant, i[1].namespace, i[1].topic, i[2])]:
            del self._partitions[ident]

    def list_groups(self, tenant: str, namespace: str) -> list[GroupOverview]:
        """The share groups of a namespace this broker has seen since it started."""
        found = []
        for key, group in self._groups.items():
            if (key.tenant, key.namespace) == (tenant, namespace):
                self._expire(key, group)
                found.append(GroupOverview(key.group_id, SHARE_GROUP_TYPE, group.state, SHARE_GROUP_TYPE))
        return found

    def describe(self, key: GroupKey) -> ShareGroup:
        """The share group, its expired members dropped (GroupNotFound: none holds the id here)."""
        group = self._groups.get(key)
        if group is None:
            raise GroupNotFound(f"group {key.group_id} is not a share group")
        self._expire(key, group)
        return group

    def _expire(self, key: GroupKey, group: ShareGroup) -> None:
        for gone in group.expire():
            self.release_member(key, gone)

    def release_member(self, key: GroupKey, member_id: str) -> None:
        """What the member holds anywhere in the group is released (it left or its session ended)."""
        for (group_key, _, _), share in self._partitions.items():
            if group_key == key:
                share.release_member(member_id)

"""The group coordinator: every membership group of every tenant/namespace, their timeouts and
their committed offsets.

Groups live in memory while used and are loaded from their stored record (store.py) when first
named after a restart; an Empty group idle for `empty_group_idle_ms` is dropped from memory (its
offsets stay stored). A group "exists" while it is in memory or has a stored record. Every
`offsets_retention_check_ms` the committed offsets of groups Empty for `offsets_retention_ms` are
deleted, and the group with them (Kafka's offsets.retention.minutes): a group counts as Empty
since its last commit or, when it had members in this process, since the last one left.

Two kinds of group share one id space: classic groups (group.py: JoinGroup, SyncGroup, ...) and
consumer-protocol groups (consumer_group.py, KIP-848: the broker assigns). As in Kafka, an Empty
group of one kind becomes the other kind when a member of the other protocol joins (its committed
offsets stay); a group with members refuses the other protocol: a consumer heartbeat to a classic
group is GroupNotFound ("not a consumer group"), a JoinGroup to a consumer group is
InconsistentGroupProtocol, and the classic member APIs find no such member (UnknownMember).

Share groups (core/shares/) take ids from the same space: a classic join under the id of a share
group with members is InconsistentGroupProtocol, a consumer heartbeat GroupNotFound.

Owned by the event loop. Group operations are synchronous state changes (group.py); only loading
a group and reading or writing offsets await. JoinGroup and SyncGroup return once the rebalance
they wait for completes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from core.clock import Clock
from core.cluster.bundles import Bundle, group_bundle, group_key
from core.errors import (CoreError, GroupError, GroupNotFound, GroupSubscribedToTopic, IllegalGeneration,
                         InconsistentGroupProtocol, InvalidGroupId, InvalidName, InvalidSessionTimeout, NonEmptyGroup,
                         NotCoordinator, OffsetMetadataTooLarge, UnknownMember, UnknownTopic)
from core.groups.consumer_group import (CONSUMER_PROTOCOL_TYPE, JOIN_EPOCH, ConsumerGroup, ConsumerGroupSummary,
                                       HeartbeatAnswer, matching, pattern)
from core.groups.group import MembershipGroup, Protocols
from core.groups.naming import storage_name
from core.groups.settings import GroupSettings
from core.groups.state import GroupState, parse_state
from core.groups.store import GroupKey, GroupRecord, GroupStore, TopicPartition
from core.groups.timers import Deadlines
from core.groups.values import (GroupOverview, GroupSummary, JoinResult, MemberSummary, OffsetAndMetadata,
                                SyncResult)
from core.names import TopicName
from core.registry import TopicInfo
from core.service import Core

log = logging.getLogger("gateway.core")

# Given a group's protocol type, chosen protocol and its members' metadata for it: the topics the
# members consume, or None when the protocol type is not one whose subscriptions are understood.
ConsumedTopics = Callable[[str | None, str | None, list[bytes]], set[str] | None]
# The rack (room) a partition of the namespace lives in, for rack-aware assignors; None: unknown.
PartitionRack = Callable[[TopicName, int], str | None]
AnyGroup = MembershipGroup | ConsumerGroup

class GroupObserver(Protocol):
    """Told of every change to what the coordinator stores or settles (e.g. to keep a log of them,
    as Kafka's __consumer_offsets is). Called synchronously; must not block."""

    def offsets_committed(self, key: GroupKey, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                          timestamp_ms: int) -> None: ...

    def offsets_deleted(self, key: GroupKey, partitions: Sequence[TopicPartition]) -> None: ...

    def group_settled(self, key: GroupKey, group: MembershipGroup) -> None:
        """The group reached a new Stable generation, or became Empty."""

    def group_deleted(self, key: GroupKey) -> None: ...


class _Unobserved:
    def offsets_committed(self, key, offsets, timestamp_ms) -> None:
        pass

    def offsets_deleted(self, key, partitions) -> None:
        pass

    def group_settled(self, key, group) -> None:
        pass

    def group_deleted(self, key) -> None:
        pass


class GroupCoordinator:
    def __init__(self, core: Core, settings: GroupSettings | None = None, clock: Clock | None = None,
                 observer: GroupObserver | None = None) -> None:
        self.settings = settings or GroupSettings()
        self.observer: GroupObserver = observer or _Unobserved()
        self._clock = clock or core.clock
        self._core = core
        self._store = GroupStore(core)
        self._groups: dict[GroupKey, AnyGroup] = {}
        self._records: dict[GroupKey, GroupRecord] = {}
        self._deadlines: Deadlines[GroupKey] = Deadlines(self._clock, self._on_due)
        self._expiry: asyncio.Task | None = None
        self._settled: dict[GroupKey, tuple[int, GroupState]] = {}   # what the observer last heard
        # Whether a share group (core/shares/) with members holds the id: then no group of these
        # kinds is made under it.
        self.share_group_active: Callable[[GroupKey], bool] = lambda key: False
        if core.cluster is not None:
            core.cluster.on_release(self._release_bundle)

    def start(self) -> None:
        """Run the offset expiry pass every offsets_retention_check_ms (needs a running loop)."""
        if self._expiry is None:
            self._expiry = asyncio.get_running_loop().create_task(self._expire_offsets_forever(),
                                                                  name="group-offset-expiry")

    def close(self) -> None:
        self._deadlines.close()
        if self._expiry is not None:
            self._expiry.cancel()

    async def _expire_offsets_forever(self) -> None:
        while True:
            await self._clock.sleep(self.settings.offsets_retention_check_ms / 1000)
            try:
                await self.expire_offsets()
            except Exception:   # storage trouble or a bug: try again next time
                log.exception("the group offset expiry pass failed")

    # --- membership -------------------------------------------------------------------------------

    async def join(self, key: GroupKey, *, member_id: str, instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: Sequence[tuple[str, bytes]], require_known_member_id: bool) -> JoinResult:
        self._check_group_id(key, allow_empty=False)
        low, high = self.settings.min_session_timeout_ms, self.settings.max_session_timeout_ms
        if not low <= session_timeout_ms <= high:
            raise InvalidSessionTimeout(f"session timeout {session_timeout_ms} ms is outside {low}..{high} ms")
        if key not in self._groups and self.share_group_active(key):
            raise InconsistentGroupProtocol(f"group {key.group_id} is a share group", member_id=member_id)
        group = await self._classic(key, create=member_id == "")
        if group is None:
            raise UnknownMember(f"group {key.group_id} does not exist")
        try:
            waiter = group.join(member_id=member_id, instance_id=instance_id, client_id=client_id,
                                client_host=client_host, session_timeout_ms=session_timeout_ms,
                                rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type,
                                protocols=_unique(protocols), require_known_member_id=require_known_member_id)
        finally:
            self._watch(key, group)
        return await waiter

    async def sync(self, key: GroupKey, *, member_id: str, instance_id: str | None, generation: int,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: Mapping[str, bytes]) -> SyncResult:
        self._check_group_id(key, allow_empty=False)
        group = await self._find(key)
        if not isinstance(group, MembershipGroup):
            raise UnknownMember(f"group {key.group_id} has no classic member {member_id!r}")
        try:
            waiter = group.sync(member_id=member_id, instance_id=instance_id, generation=generation,
                                protocol_type=protocol_type, protocol_name=protocol_name, assignments=assignments)
        finally:
            self._watch(key, group)
        return await waiter

    async def heartbeat(self, key: GroupKey, *, member_id: str, instance_id: str | None, generation: int) -> None:
        self._check_group_id(key, allow_empty=False)
        group = await self._find(key)
        if not isinstance(group, MembershipGroup):
            raise UnknownMember(f"group {key.group_id} has no classic member {member_id!r}")
        try:
            group.heartbeat(member_id=member_id, instance_id=instance_id, generation=generation)
        finally:
            self._watch(key, group)

    async def leave(self, key: GroupKey, members: Sequence[tuple[str, str | None]]) -> list[GroupError | None]:
        """Each leaving member's error (None: it left). Raises only for the group id itself."""
        self._check_group_id(key, allow_empty=False)
        group = await self._find(key)
        if not isinstance(group, MembershipGroup):
            return [UnknownMember(f"group {key.group_id} has no classic members") for _ in members]
        try:
            return group.leave(members)
        finally:
            self._watch(key, group)

    async def consumer_heartbeat(self, key: GroupKey, *, member_id: str, member_epoch: int,
                                 instance_id: str | None, rack: str | None, rebalance_timeout_ms: int,
                                 topics: Sequence[str] | None, regex: str | None, assignor: str | None,
                                 owned: Iterable[tuple[str, int]] | None, client_id: str, client_host: str,
                                 partition_rack: PartitionRack) -> tuple[HeartbeatAnswer, dict[str, str]]:
        """A consumer-protocol heartbeat (consumer_group.py). `owned` names topics by id (hex).
        Returns the answer and the id of every topic its assignment names."""
        if regex:
            pattern(regex)      # an invalid expression is refused before the group is touched
        self._check_group_id(key, allow_empty=False)
        if key not in self._groups and self.share_group_active(key):
            raise GroupNotFound(f"group {key.group_id} is a share group")
        group = await self._find(key, create=member_epoch == JOIN_EPOCH, consumer=True)
        if group is None:
            # Unknown here (deleted, or never stored): the member joins again, as after a fencing.
            raise UnknownMember(f"group {key.group_id} does not exist")
        if isinstance(group, MembershipGroup):
            if group.state is not GroupState.EMPTY:
                raise GroupNotFound(f"group {key.group_id} is not a consumer group")
            group.mark_dead()
            record = self._records[key]
            record.group_type = CONSUMER_PROTOCOL_TYPE
            group = self._install(key, self._new_group(key, record))
            log.info("group %s of %s/%s: now a consumer group", key.group_id, key.tenant, key.namespace)
        assert isinstance(group, ConsumerGroup)
        regexes = group.regexes() | ({regex} if regex else set())
        namespace_topics: list[str] = []
        if regexes:   # matched against every topic of the namespace, on every heartbeat
            namespace_topics = await self._core.registry.list_topics(key.tenant, key.namespace)
        wanted = group.subscribed_topics() | set(topics or ()) | matching(regexes, namespace_topics)
        infos = await self._topic_infos(key, wanted)
        if self._groups.get(key) is not group:   # replaced or dropped while the topics were read
            raise NotCoordinator(f"group {key.group_id} changed meanwhile; try again")
        names = {info.topic_id: name for name, info in infos.items()}
        layouts = {name: tuple(partition_rack(TopicName.of(name, key.tenant, key.namespace), index)
                               for index in range(info.partitions)) for name, info in infos.items()}
        try:
            answer = group.heartbeat(
                member_id=member_id, member_epoch=member_epoch, instance_id=instance_id, rack=rack,
                rebalance_timeout_ms=rebalance_timeout_ms, topics=None if topics is None else set(topics),
                regex=regex, namespace_topics=namespace_topics,
                assignor=assignor, client_id=client_id, client_host=client_host, layouts=layouts,
                owned=None if owned is None else {(names[t], i) for t, i in owned if t in names})
        finally:
            self._watch(key, group)
        record = self._records[key]
        if group.group_epoch != record.group_epoch or not record.stored:
            record.group_type, record.group_epoch = CONSUMER_PROTOCOL_TYPE, group.group_epoch
            await self._store.save(key, record)
        ids = {topic: infos[topic].topic_id for topic, _ in answer.assignment or () if topic in infos}
        return answer, ids

    async def _topic_infos(self, key: GroupKey, topics: Iterable[str]) -> dict[str, TopicInfo]:
        """The descriptions of those of `topics` that exist (cached by the registry)."""
        found = {}
        for topic in sorted(topics):
            try:
                found[topic] = await self._core.registry.get_topic(TopicName.of(topic, key.tenant, key.namespace))
            except (UnknownTopic, InvalidName):
                continue
        return found

    # --- offsets ----------------------------------------------------------------------------------

    async def commit_offsets(self, key: GroupKey, offsets: Mapping[TopicPartition, OffsetAndMetadata], *,
                             member_id: str = "", instance_id: str | None = None, generation: int = -1,
                             check_membership: bool = True, epoch_aware: bool = True
                             ) -> dict[TopicPartition, CoreError | None]:
        """Commit offsets; each partition's error (None: committed and durable). Partitions that do
        not exist fail alone; the group's refusals apply to the rest. Without `check_membership`
        (Kafka's v0 commits) the group's state is not consulted. Members of consumer-protocol
        groups commit at their member epoch, in requests that can say so (`epoch_aware`)."""
        results: dict[TopicPartition, CoreError | None] = {}
        self._check_group_id(key, allow_empty=True)
        valid: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, committed in offsets.items():
            if not await self._partition_exists(key, tp):
                results[tp] = UnknownTopic(f"{tp[0]}-{tp[1]} does not exist")
            else:
                valid[tp] = committed
        if not valid:
            return results
        group = await self._find(key, create=generation < 0 or not check_membership)
        if group is None:
            error: CoreError = IllegalGeneration(f"group {key.group_id} does not exist (generation {generation})")
            return results | {tp: error for tp in valid}
        if check_membership:
            try:
                if isinstance(group, ConsumerGroup):
                    group.validate_commit(member_id=member_id, generation=generation, partitions=valid,
                                          epoch_aware=epoch_aware)
                else:
                    group.validate_commit(member_id=member_id, instance_id=instance_id, generation=generation)
            except GroupError as exc:
                return results | {tp: exc for tp in valid}
            finally:
                self._watch(key, group)
        limit = self.settings.offset_metadata_max_bytes
        accepted = {}
        for tp, committed in valid.items():
            if len(committed.metadata) > limit:
                results[tp] = OffsetMetadataTooLarge(f"metadata of {len(committed.metadata)} characters > {limit}")
            else:
                accepted[tp] = committed
        if accepted:
            await self._store.commit(key, self._records[key], accepted, group.protocol_type)
            results.update((tp, None) for tp in accepted)
            self.observer.offsets_committed(key, accepted, self._clock.now_ms())
        return results

    async def fetch_offsets(self, key: GroupKey, partitions: Iterable[TopicPartition] | None
                            ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """Committed offsets (None: none committed). `partitions=None`: every committed one."""
        self._check_group_id(key, allow_empty=True)
        if partitions is not None:
            return await self._store.fetch(key, partitions)
        record = self._records.get(key) or await self._store.load(key)
        if record is None:
            return {}
        found = await self._store.fetch(key, record.topic_partitions())
        return {tp: committed for tp, committed in found.items() if committed is not None}

    async def delete_offsets(self, key: GroupKey, partitions: Sequence[TopicPartition],
                             consumed_topics: ConsumedTopics) -> dict[TopicPartition, CoreError | None]:
        """Delete committed offsets; each partition's error. Raises for the group as a whole:
        GroupNotFound, or NonEmptyGroup for a live group whose subscriptions are not understood.
        A live group keeps the offsets of topics its members consume (GroupSubscribedToTopic)."""
        self._check_group_id(key, allow_empty=False)
        results: dict[TopicPartition, CoreError | None] = {}
        existing = []
        for tp in dict.fromkeys(partitions):
            if await self._partition_exists(key, tp):
                existing.append(tp)
            else:
                results[tp] = UnknownTopic(f"{tp[0]}-{tp[1]} does not exist")
        group = await self._find(key)
        if group is None:
            raise GroupNotFound(f"group {key.group_id} does not exist")
        eligible = existing
        if group.state is not GroupState.EMPTY:
            if isinstance(group, ConsumerGroup):
                topics: set[str] | None = set(group.subscribed_topics())
            elif group.protocol_name is None:
                topics = {topic for topic, _ in existing}   # subscriptions not known yet
            else:
                topics = consumed_topics(group.protocol_type, group.protocol_name, group.member_metadata())
            if topics is None:
                raise NonEmptyGroup(f"group {key.group_id} is {group.state.value}")
            eligible = [tp for tp in existing if tp[0] not in topics]
            for tp in existing:
                if tp[0] in topics:
                    results[tp] = GroupSubscribedToTopic(f"group {key.group_id} consumes {tp[0]}")
        record = self._records[key]
        if eligible:
            await self._store.delete(key, record, eligible)
            results.update((tp, None) for tp in eligible)
            self.observer.offsets_deleted(key, eligible)
        if group.state is GroupState.EMPTY and not record.partitions and self._groups.get(key) is group:
            self._drop(key)   # an Empty group without offsets is gone, as in Kafka
        return results

    # --- administration ---------------------------------------------------------------------------

    async def describe(self, key: GroupKey) -> GroupSummary:
        self._check_group_id(key, allow_empty=True)
        group = await self._find(key)
        if group is None:
            return GroupSummary(key.group_id, GroupState.DEAD.value, "", "")
        if isinstance(group, ConsumerGroup):   # as the classic API can show it: no metadata, no assignment
            return GroupSummary(key.group_id, group.state.value, CONSUMER_PROTOCOL_TYPE, "", tuple(
                MemberSummary(m.member_id, m.instance_id, m.client_id, m.client_host, b"", b"")
                for m in group.members.values()))
        return group.summary()

    async def describe_consumer_group(self, key: GroupKey) -> ConsumerGroupSummary:
        """A consumer-protocol group in full (GroupNotFound: none, or a classic group)."""
        self._check_group_id(key, allow_empty=True)
        group = await self._find(key)
        if not isinstance(group, ConsumerGroup):
            raise GroupNotFound(f"group {key.group_id} is not a consumer group" if group is not None
                                else f"group {key.group_id} does not exist")
        return group.summary()

    async def validate_offset_fetch(self, key: GroupKey, member_id: str | None, member_epoch: int) -> None:
        """An OffsetFetch v9 naming a member of a consumer-protocol group: UnknownMember or
        StaleMemberEpoch unless it is in the group at that epoch. Naming none (null id, epoch < 0),
        classic groups and unknown ids are not checked, as in Kafka."""
        self._check_group_id(key, allow_empty=True)
        if member_id is None and member_epoch < 0:
            return
        group = await self._find(key)
        if isinstance(group, ConsumerGroup):
            group.validate_fetch(member_id=member_id, member_epoch=member_epoch)

    async def list_groups(self, tenant: str, namespace: str, states: Iterable[str] = ()) -> list[GroupOverview]:
        """The groups of a namespace this broker coordinates, optionally only those in `states` (state
        names, any case). Kafka's admin clients ask every broker and merge the answers."""
        wanted = {parse_state(name) for name in states}
        found = {key.group_id: group.overview() for key, group in self._groups.items()
                 if (key.tenant, key.namespace) == (tenant, namespace) and group.state is not GroupState.DEAD}
        for group_id in await self._store.stored_group_ids(tenant, namespace):
            if group_id in found or not self.owned(GroupKey(tenant, namespace, group_id)):
                continue
            record = await self._store.load(GroupKey(tenant, namespace, group_id))   # not in memory: Empty
            if record is not None:
                found[group_id] = GroupOverview(group_id, record.protocol_type or record.group_type or "",
                                                GroupState.EMPTY.value, record.group_type or "classic")
        overviews = sorted(found.values(), key=lambda o: o.group_id)
        if wanted:
            overviews = [o for o in overviews if parse_state(o.state) in wanted]
        return overviews

    async def delete_group(self, key: GroupKey) -> None:
        """Delete an Empty group and its committed offsets (GroupNotFound, NonEmptyGroup)."""
        self._check_group_id(key, allow_empty=True)
        group = await self._find(key)
        if group is None:
            raise GroupNotFound(f"group {key.group_id} does not exist")
        if group.state is not GroupState.EMPTY:
            raise NonEmptyGroup(f"group {key.group_id} is {group.state.value}")
        record = self._records[key]
        group.mark_dead()
        self._drop(key)
        await self._delete_all(key, record)
        log.info("group %s of %s/%s deleted", key.group_id, key.tenant, key.namespace)

    async def expire_offsets(self) -> list[GroupKey]:
        """Delete the committed offsets, and so the group, of every group Empty for longer than
        offsets_retention_ms; returns the groups deleted."""
        expired = []
        for key in await self._store.stored_keys():
            group = self._groups.get(key)
            if group is not None and group.state is not GroupState.EMPTY:
                continue
            record = self._records.get(key) or await self._store.load(key)
            if record is None:
                continue
            since = await self._store.last_commit_ms(key, record)
            group = self._groups.get(key)   # looked up again: the awaits above let requests in
            if group is not None:
                if group.state is not GroupState.EMPTY:
                    continue
                since = max(since, group.empty_since_ms)
            if since + self.settings.offsets_retention_ms > self._clock.now_ms():
                continue
            if group is not None:
                record = self._records[key]
                group.mark_dead()
                self._drop(key)
            await self._delete_all(key, record)
            expired.append(key)
            log.info("group %s of %s/%s: committed offsets expired", key.group_id, key.tenant, key.namespace)
        return expired

    async def _delete_all(self, key: GroupKey, record: GroupRecord) -> None:
        partitions = record.topic_partitions()
        await self._store.delete_all(key, record)
        self.observer.offsets_deleted(key, partitions)
        self.observer.group_deleted(key)
        self._settled.pop(key, None)

    # --- time -------------------------------------------------------------------------------------

    def expire_due(self) -> None:
        """Apply every group timeout that is due now (the timer task calls this by itself)."""
        self._deadlines.fire_due()

    def _on_due(self, key: GroupKey) -> None:
        group = self._groups.get(key)
        if group is None:
            return
        group.expire()
        idle = group.idle_deadline_ms
        if idle is not None and idle <= self._clock.now_ms():
            self._drop(key)
            return
        self._watch(key, group)

    def _watch(self, key: GroupKey, group: AnyGroup) -> None:
        """Called after every change to a group: re-arm its timer, tell the observer what settled."""
        self._deadlines.schedule(key, group.next_deadline())
        settled = (group.generation, group.state)
        if (isinstance(group, MembershipGroup) and group.state in (GroupState.STABLE, GroupState.EMPTY)
                and self._settled.get(key, (0, GroupState.EMPTY)) != settled):
            self._settled[key] = settled
            self.observer.group_settled(key, group)

    # --- groups -----------------------------------------------------------------------------------

    def group(self, key: GroupKey) -> AnyGroup | None:
        """The group if it is in memory (for inspection)."""
        return self._groups.get(key)

    async def exists(self, key: GroupKey) -> bool:
        """Whether a classic or consumer group holds the id (in memory or stored)."""
        return key in self._groups or await self._store.load(key) is not None

    async def _find(self, key: GroupKey, *, create: bool = False, consumer: bool = False) -> AnyGroup | None:
        """The group, loaded from its record if need be; a new one (consumer-protocol if `consumer`)
        if it does not exist and `create`."""
        group = self._groups.get(key)
        if group is not None:
            return group
        record = await self._store.load(key)
        group = self._groups.get(key)    # loaded by someone else meanwhile
        if group is not None:
            return group
        if record is None:
            if not create:
                return None
            record = GroupRecord(group_type=CONSUMER_PROTOCOL_TYPE if consumer else None)
        self._records[key] = record
        return self._install(key, self._new_group(key, record))

    def _new_group(self, key: GroupKey, record: GroupRecord) -> AnyGroup:
        if record.group_type == CONSUMER_PROTOCOL_TYPE:
            return ConsumerGroup(key.group_id, self._clock, self.settings, group_epoch=record.group_epoch)
        return MembershipGroup(key.group_id, self._clock, self.settings, protocol_type=record.protocol_type)

    def _install(self, key: GroupKey, group: AnyGroup) -> AnyGroup:
        self._groups[key] = group
        self._watch(key, group)
        return group

    async def _classic(self, key: GroupKey, *, create: bool) -> MembershipGroup | None:
        group = await self._find(key, create=create)
        if isinstance(group, ConsumerGroup):
            if group.state is not GroupState.EMPTY:
                raise InconsistentGroupProtocol(f"group {key.group_id} is a consumer group with members", member_id="")
            record = self._records[key]
            record.group_type = None
            group.mark_dead()
            group = self._install(key, self._new_group(key, record))
            log.info("group %s of %s/%s: now a classic group", key.group_id, key.tenant, key.namespace)
            if record.stored:
                await self._store.save(key, record)
        assert group is None or isinstance(group, MembershipGroup)
        return group

    def _drop(self, key: GroupKey) -> None:
        self._groups.pop(key, None)
        self._records.pop(key, None)
        self._settled.pop(key, None)

    async def _partition_exists(self, key: GroupKey, tp: TopicPartition) -> bool:
        try:
            info = await self._core.registry.get_topic(TopicName.of(tp[0], key.tenant, key.namespace))
        except (UnknownTopic, InvalidName):
            return False
        return 0 <= tp[1] < info.partitions

    def _check_group_id(self, key: GroupKey, *, allow_empty: bool) -> None:
        if key.group_id == "" and not allow_empty:
            raise InvalidGroupId("the group id must not be empty")
        storage_name(key.group_id)   # InvalidGroupId if it cannot be stored
        cluster = self._core.cluster
        if cluster is not None and not cluster.owns(group_bundle(key.tenant, key.namespace, key.group_id)):
            raise NotCoordinator(f"broker {cluster.local.id} does not coordinate group {key.group_id}")

    def owned(self, key: GroupKey) -> bool:
        cluster = self._core.cluster
        return cluster is None or cluster.owns(group_bundle(key.tenant, key.namespace, key.group_id))

    async def _release_bundle(self, bundle: Bundle) -> None:
        """Another broker coordinates these groups now: forget them (their waiters are answered,
        their members join again there; offsets are stored, the new coordinator reads them)."""
        for key in [k for k in self._groups if bundle.holds(k.tenant, k.namespace, group_key(k.group_id))]:
            self._groups[key].hand_over(NotCoordinator(f"group {key.group_id} moved to another broker"))
            self._drop(key)


def _unique(protocols: Sequence[tuple[str, bytes]]) -> Protocols:
    """The protocols with each name once (its first occurrence), as Kafka keys them by name."""
    seen: dict[str, bytes] = {}
    for name, metadata in protocols:
        seen.setdefault(name, bytes(metadata))
    return tuple(seen.items())

"""Geo-replication: a namespace's topics copied to a remote cluster as mirror topics, offset for offset.

For each local partition this broker serves, a copier asks the remote partition's end (its high
watermark: copying resumes there, so there is no cursor of its own that could disagree with the
remote after a crash), reads the local log from that offset and sends the batches as they are
stored, base offsets included, to the remote partition's owner, which appends each at its own
offset (core Partition.append_mirrored) and skips one it already has. Then it waits for new records.
Transaction markers are copied like any batch, so read_committed readers of a mirror see what they
would see here.

Consumer groups follow: every GROUP_SYNC_S the committed offsets of the groups this broker
coordinates, on the topics the link copies, are committed to the remote group of the same name,
each no further than the mirror holds (a consumer there would otherwise start past its end and
reset). Offsets need no translation: they are the same on both sides. A group with members on the
remote keeps its own positions (its coordinator refuses a commit from outside the group).

Topic settings follow too (`sync_configs`): a mirror is created with the settings set on its topic,
and every CONFIG_SYNC_S the broker serving a topic's partition 0 compares them with the mirror's and
sets or removes what differs (MirrorMaker 2's sync.topic.configs), except the ones that describe
this cluster rather than the data (NOT_COPIED).

Topic ACLs follow on the same schedule (`sync_acls`), as MirrorMaker 2's sync.topic.acls does: each
ACL of the local tenant naming such a topic literally is created on the remote (in the tenant of the
link's user) unless it is there already. An ALLOW of WRITE is not copied (only the link writes a
mirror) and an ALLOW of ALL arrives as READ. Nothing is removed on the remote: an ACL deleted here
stays there until an operator deletes it.

A copier only reads the local log: a remote that is slow, paused or down never holds back local
producers. Its copiers retry with backoff, and the lag (records here not yet there) is reported
per partition. Topics that are themselves mirrors are never copied on (no loops), nor internal
topics (names beginning with "__", MirrorMaker's default exclusion too).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass, field

from core.acl import AclBinding, AccessControlEntry, Operation, PatternType, Permission, ResourceType
from core.errors import CoreError, UnknownTopic
from core.groups.store import GroupKey
from core.names import TopicName
from core.records import batch as record_batch
from protocols.kafka.mirror.client import RemoteCluster, RemoteError

log = logging.getLogger("gateway.replication")

SCAN_S = 2.0                 # how often the namespace's topics and this broker's partitions are listed
WAIT_S = 5.0                 # a copier waiting for new records looks again after this long anyway
MAX_COPY_BYTES = 1 << 20     # read and sent per request
BACKOFF_S = (0.2, 5.0)       # first and longest pause after a failure
GROUP_SYNC_S = 5.0           # how often committed offsets are carried over (MirrorMaker 2: 60 s)
INTERNAL_PREFIX = "__"       # __consumer_offsets, the delayed-delivery store's: never copied (nor by MirrorMaker)
CONFIG_SYNC_S = 10.0         # how often topic settings are compared with the mirrors' (MirrorMaker 2: 600 s)
MIRROR_SOURCE = "mirror.source"
# Settings of this cluster rather than of the data (MirrorMaker 2 leaves out the same kind); the
# mirror's own mirror.source names this link.
NOT_COPIED = frozenset({MIRROR_SOURCE, "min.insync.replicas", "unclean.leader.election.enable",
                        "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"})


def copied_configs(configs: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in configs.items() if name not in NOT_COPIED}


def mirrored_acl(binding: AclBinding) -> AclBinding | None:
    """A topic ACL as it is created for the mirror; None if it is not copied."""
    entry = binding.entry
    if entry.permission is Permission.ALLOW and entry.operation is Operation.WRITE:
        return None
    if entry.permission is Permission.ALLOW and entry.operation is Operation.ALL:
        entry = AccessControlEntry(entry.principal, entry.host, Operation.READ, entry.permission)
    return AclBinding(binding.pattern, entry)


@dataclass
class LinkStats:
    """What a link has done, for /metrics."""

    lag: dict[tuple[str, int], int] = field(default_factory=dict)   # records not yet on the remote
    copied_records: int = 0
    copied_bytes: int = 0
    failures: int = 0
    group_commits: int = 0     # groups whose offsets were committed on the remote
    config_syncs: int = 0      # mirrors whose settings were changed to match their topic's
    acls_created: int = 0      # topic ACLs created on the remote


class Replicator:
    """One `[[replication]]` link: the local namespace's topics matching `topics` to `remote`."""

    def __init__(self, core, name: str, remote: RemoteCluster, tenant: str, namespace: str,
                 topics: str = ".*", groups=None, sync_configs: bool = True, acls=None) -> None:
        """`groups`: the Kafka group coordinator, whose committed offsets are carried over (None: not).
        `sync_configs`: copy topic settings to the mirrors. `acls`: the Kafka authorizer, whose topic
        ACLs are copied (None: not)."""
        self.name = name
        self.stats = LinkStats()
        self._core = core
        self._remote = remote
        self._tenant, self._namespace = tenant, namespace
        self._topics = re.compile(topics)
        self._copiers: dict[tuple[str, int], asyncio.Task] = {}
        self._running: asyncio.Task | None = None
        self._groups = groups
        self._syncing: asyncio.Task | None = None
        self._synced: dict[str, dict] = {}     # group -> the offsets last committed there in full
        self._sync_configs = sync_configs
        self._acls = acls
        self._configs_synced_at = float("-inf")

    def start(self) -> None:
        self._running = asyncio.ensure_future(self._run())
        if self._groups is not None:
            self._syncing = asyncio.ensure_future(self._sync_groups_forever())

    async def close(self) -> None:
        tasks = [t for t in (self._running, self._syncing, *self._copiers.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._copiers.clear()
        self._remote.close()

    async def _run(self) -> None:
        while True:
            try:
                leading = await self._scan()
                if time.monotonic() - self._configs_synced_at >= CONFIG_SYNC_S:
                    self._configs_synced_at = time.monotonic()
                    if self._sync_configs:
                        await self._sync_topic_configs(leading)
                    if self._acls is not None:
                        await self._sync_topic_acls(leading)
            except CoreError as exc:
                log.warning("replication %s: listing %s/%s failed: %s", self.name, self._tenant, self._namespace, exc)
            except RemoteError as exc:
                self.stats.failures += 1
                log.warning("replication %s: copying topic settings or ACLs: %s; retrying", self.name, exc)
            await asyncio.sleep(SCAN_S)

    async def _scan(self) -> list[TopicName]:
        """Start and stop copiers for the partitions this broker serves; the topics whose
        partition 0 it serves (it keeps their mirrors' settings in step)."""
        wanted: dict[tuple[str, int], tuple[TopicName, int]] = {}   # -> the topic's name and partition count
        registry = self._core.registry
        for topic in await registry.list_topics(self._tenant, self._namespace):
            if not self._copies(topic):
                continue
            name = TopicName(self._tenant, self._namespace, topic)
            try:
                info = await registry.get_topic(name)
            except UnknownTopic:     # deleted since it was listed
                continue
            if info.configs.get(MIRROR_SOURCE):
                continue
            for index in range(info.partitions):
                if self._core.serves(name, index):
                    wanted[(topic, index)] = (name, info.partitions)
        for key in [k for k in self._copiers if k not in wanted]:
            self._copiers.pop(key).cancel()
            self.stats.lag.pop(key, None)
        for key, (name, partitions) in wanted.items():
            if key not in self._copiers or self._copiers[key].done():
                self._copiers[key] = asyncio.ensure_future(self._copy(name, key[1], partitions))
        return [name for (_, index), (name, _) in wanted.items() if index == 0]

    async def _sync_topic_configs(self, topics: list[TopicName]) -> None:
        for name in topics:
            try:
                wanted = copied_configs((await self._core.registry.get_topic(name)).configs)
            except UnknownTopic:
                continue
            there = await self._remote.topic_configs(name.topic)
            if there is None:
                continue      # not created yet: created with them
            there = copied_configs(there)
            changed = {key: value for key, value in wanted.items() if there.get(key) != value}
            removed = sorted(there.keys() - wanted.keys())
            if changed or removed:
                await self._remote.alter_topic_configs(name.topic, changed, removed)
                self.stats.config_syncs += 1
                log.info("replication %s: settings of mirror %s changed: set %s, removed %s", self.name,
                         name.topic, sorted(changed), removed)

    async def _sync_topic_acls(self, topics: list[TopicName]) -> None:
        names = {name.topic for name in topics}
        if not names:
            return
        wanted = {mirrored for binding in await self._acls.acls(self._tenant)
                  if binding.pattern.resource_type is ResourceType.TOPIC
                  and binding.pattern.pattern_type is PatternType.LITERAL and binding.pattern.name in names
                  and (mirrored := mirrored_acl(binding)) is not None}
        missing = list(wanted - await self._remote.topic_acls())
        if missing:
            await self._remote.create_acls(missing)
            self.stats.acls_created += len(missing)
            log.info("replication %s: %d topic ACL(s) created on the remote", self.name, len(missing))

    async def _copy(self, name: TopicName, index: int, partitions: int) -> None:
        backoff = BACKOFF_S[0]
        failed_with = None
        while True:
            try:
                await self._ensure_mirror(name, partitions)
                position = await self._remote.end_offset(name.topic, index)
                while True:
                    position = await self._copy_from(name, index, position)
                    backoff, failed_with = BACKOFF_S[0], None
            except (RemoteError, CoreError) as exc:
                self.stats.failures += 1
                if str(exc) != failed_with:   # logged once per distinct failure, not per retry
                    log.warning("replication %s: %s-%d: %s; retrying", self.name, name.topic, index, exc)
                    failed_with = str(exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_S[1])

    async def _copy_from(self, name: TopicName, index: int, position: int) -> int:
        """Send what the local partition holds from `position` (waiting for it if nothing yet); returns
        the next position."""
        partition = await self._core.partition(name, index)
        end = partition.high_watermark
        self.stats.lag[(name.topic, index)] = max(0, end - position)
        if position >= end:
            await partition.wait_for_data(position, WAIT_S)
            return position
        # Below the log start the records went by retention before they were copied: the mirror
        # begins at the log start when it holds nothing yet, else the remote refuses the gap.
        result = await partition.read(max(position, partition.log_start_offset), MAX_COPY_BYTES)
        if not result.records:
            return position
        headers = [record_batch.read_header(b) for b in record_batch.split_batches(result.records)]
        await self._remote.produce(name.topic, index, result.records)
        self.stats.copied_records += sum(h.record_count for h in headers)
        self.stats.copied_bytes += len(result.records)
        last = headers[-1]
        return last.base_offset + last.record_count

    def _copies(self, topic: str) -> bool:
        return not topic.startswith(INTERNAL_PREFIX) and self._topics.fullmatch(topic) is not None

    async def _sync_groups_forever(self) -> None:
        failed_with = None
        while True:
            await asyncio.sleep(GROUP_SYNC_S)
            try:
                await self._sync_groups()
                failed_with = None
            except (RemoteError, CoreError) as exc:
                self.stats.failures += 1
                if str(exc) != failed_with:
                    log.warning("replication %s: carrying group offsets over: %s; retrying", self.name, exc)
                    failed_with = str(exc)

    async def _sync_groups(self) -> None:
        for overview in await self._groups.list_groups(self._tenant, self._namespace):
            if overview.group_type not in ("classic", "consumer"):
                continue
            key = GroupKey(self._tenant, self._namespace, overview.group_id)
            committed = {tp: c.offset for tp, c in (await self._groups.fetch_offsets(key, None)).items()
                         if c is not None and self._copies(tp[0])}
            if not committed or self._synced.get(key.group_id) == committed:
                continue
            ends = await asyncio.gather(*(self._remote.end_offset(topic, index) for topic, index in committed))
            offsets = {tp: min(offset, end) for (tp, offset), end in zip(committed.items(), ends)}
            if await self._remote.commit_offsets(key.group_id, offsets):
                self.stats.group_commits += 1
                if offsets == committed:      # else the mirror is behind: carried further next time
                    self._synced[key.group_id] = committed

    async def _ensure_mirror(self, name: TopicName, partitions: int) -> None:
        topic = name.topic
        remote_partitions = await self._remote.partitions(topic)
        if remote_partitions is None:
            configs = copied_configs((await self._core.registry.get_topic(name)).configs) if self._sync_configs else {}
            await self._remote.create_topic(topic, partitions, {**configs, MIRROR_SOURCE: self.name})
        elif remote_partitions < partitions:
            raise RemoteError(f"the remote {topic} has {remote_partitions} partitions, fewer than the {partitions} here")


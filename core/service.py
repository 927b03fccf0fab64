"""The core as one object: the registry, open partitions, cursors, delayed messages and the retention
sweep (time and size, and what every subscription consumed where a topic asks for it: core/retention.py).

Partitions open lazily on first use and close again after being idle (or when too many are open),
so the number of topics does not bound memory; reopening an idle partition costs one metadata read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict

from core.broker_configs import BrokerConfigs
from core.clock import Clock, SystemClock
from core.cluster.broker_cluster import BrokerCluster
from core.cluster.bundles import Bundle, key_hash, partition_bundle, partition_key
from core.cluster.load import MESSAGE_BYTES
from core.cluster.guarded import GuardedMetadata
from core.cluster.mailbox import Mailbox
from core.cluster.members import READ_ONLY
from core.cluster.peers import PeerService
from core.connections import ClientConnections
from core.cursor import Cursor
from core.delayed.service import DelayedService
from core.errors import CoreError, NotOwner, UnknownTopic
from core.meters import NamespaceMeter, NamespaceMeters
from core.names import TopicName
from core.open_once import OpenOnce
from core.partition import GAP_AFTER_REFUSAL_MS, Partition, retention_policy, storage_errors
from core.replicas import ReadReplicas
from core.policies import NamespacePolicies
from core.registry import Registry, TopicInfo
from core.access import AccessControl
from core.audit import AuditLog
from core.backlog_quota import enforce_backlog_quota
from core.retention import delete_consumed
from core.tenancy import Tenancy
from core.topic_config import EffectiveConfig
from core.trace import Tracer
from core.producer_notes import ProducerNotes
from core.producer_snapshots import ProducerSnapshots
from core.transactions.aborted_index import AbortedIndexStore
from storage.api import ManagedLogFactory, MetadataStore

log = logging.getLogger("gateway.core")

MAX_OPEN_PARTITIONS = 20_000
MAX_REMEMBERED_REFUSALS = 10_000   # partitions whose opening was refused lately (Core._refused_opening)
IDLE_CLOSE_S = 600.0
RETENTION_CHECK_S = 60.0


class Core:
    def __init__(self, metadata: MetadataStore, logs: ManagedLogFactory, clock: Clock | None = None,
                 cluster: BrokerCluster | None = None, retention_check_s: float = RETENTION_CHECK_S, *,
                 delayed_memory_keys: int | None = None, peers: PeerService | None = None) -> None:
        """`cluster`: this broker's membership when several brokers share the storage; None (one
        process) owns every partition. `peers`: its links with the other brokers (a cluster's data
        path: publishes into queues they serve). `retention_check_s`: how often retention and backlog quotas
        are enforced. `delayed_memory_keys`: held (delayed) messages each namespace keeps in memory;
        the rest wait on storage (None: the default, core/delayed/store.py)."""
        self.metadata = metadata
        self.logs = logs
        self.clock = clock or SystemClock()
        self.cluster = cluster
        self.peers = peers
        if cluster is not None:
            # A partition is open only while its bundle is owned: closed on release, and anything
            # still cached when a bundle is taken (again) is stale.
            cluster.on_release(self._close_bundle)
            cluster.on_acquire(self._take_bundle)
            cluster.partition_weights = self.partition_weights     # where a split divides a bundle
        self.registry = Registry(metadata, self.clock)
        self.broker_configs = BrokerConfigs(metadata)   # broker-level topic defaults, changeable at run time
        self._partitions: OrderedDict[tuple[TopicName, int], Partition] = OrderedDict()
        self._last_used: dict[tuple[TopicName, int], float] = {}
        self._opening = OpenOnce()
        # Leader epochs of the partitions opened since their bundle was taken, kept when they close
        # idle (reopening keeps the epoch: the same writer), dropped when the bundle goes.
        self._epochs: dict[tuple[TopicName, int], int] = {}
        self._refusals: dict[tuple[TopicName, int], int] = {}   # when opening each was last refused (ms)
        self._sweeper: asyncio.Task | None = None
        self._retention_check_s = retention_check_s
        self._takeovers: set[asyncio.Task] = set()
        # delayed messages: held until due, then routed
        self.delayed = DelayedService(self) if delayed_memory_keys is None else \
            DelayedService(self, memory_keys=delayed_memory_keys)
        self.connections = ClientConnections(metadata, self._max_connections)   # this process's clients
        self.tenancy = Tenancy(self)            # tenants and namespaces at runtime, their policies
        self.meters = NamespaceMeters(metadata)  # each namespace's rates, rate limits and policies
        self.access = AccessControl(metadata)   # who may do what: users' grants, kept current
        self.audit = AuditLog()                 # admin changes and refusals; written once the gateway opens it
        self.meters.on_policies(self._apply_policies)
        # A read-only broker serves reads of partitions it does not own (core/replicas.py).
        self.replicas = ReadReplicas(self) if cluster is not None and cluster.local.role == READ_ONLY else None
        # Requests between brokers for state the other one owns (transaction markers, offsets).
        self.mailbox = Mailbox(metadata, cluster, self.owner_metadata) if cluster is not None else None

    async def start(self) -> None:
        await self.registry.start()
        await self.broker_configs.load()
        await self.delayed.start()
        self._sweeper = asyncio.create_task(self._sweep(), name="core-retention")

    # --- topics -------------------------------------------------------------------------------

    async def create_topic(self, name: TopicName, partitions: int, configs: dict[str, str] | None = None,
                           *, validate_only: bool = False) -> TopicInfo:
        return await self.registry.create_topic(name, partitions, configs, validate_only=validate_only)

    async def delete_topic(self, name: TopicName) -> None:
        info = await self.registry.delete_topic(name)
        if self.replicas is not None:
            await self.replicas.forget_topic(name)
        for index in range(info.partitions):
            partition = self._partitions.pop((name, index), None)
            self._last_used.pop((name, index), None)
            self._epochs.pop((name, index), None)   # a topic made again under this name starts over
            if partition is not None:
                await partition.close()
            await self.logs.delete_log(name.partition_log(index))
            for cursor in await self.metadata.children(f"/cursors/{name.path}/{index}"):
                await (await Cursor.load(self.metadata, self.clock, name, index, cursor)).delete()

    async def alter_topic_configs(self, name: TopicName, changes: dict[str, str | None], *,
                                  replace_all: bool = False, validate_only: bool = False) -> TopicInfo:
        info = await self.registry.alter_configs(name, changes, replace_all=replace_all, validate_only=validate_only)
        if not validate_only:
            self._reconfigure(info)
        return info

    def effective_config(self, info: TopicInfo, policies: NamespacePolicies | None = None) -> EffectiveConfig:
        """The topic's own configs over its namespace's policies over the broker-level defaults."""
        if policies is None:
            policies = self.meters.of(info.name.tenant, info.name.namespace).policies
        return EffectiveConfig.of({**_namespace_defaults(policies), **info.configs},
                                  self.broker_configs.topic_defaults())

    async def alter_broker_configs(self, scope: str, configs: dict[str, str]) -> None:
        """Replace the broker-level topic defaults of `scope` (core/broker_configs.py); open
        partitions take the new values at once."""
        await self.broker_configs.replace(scope, configs)
        for name in {name for name, _ in self._partitions}:
            try:
                self._reconfigure(await self.registry.get_topic(name))
            except UnknownTopic:
                continue

    def _reconfigure(self, info: TopicInfo) -> None:
        config = self.effective_config(info)
        for index in range(info.partitions):
            partition = self._partitions.get((info.name, index))
            if partition is not None:
                partition.config = config
                partition.log.policy = retention_policy(config)

    async def add_partitions(self, name: TopicName, total: int, *, validate_only: bool = False) -> TopicInfo:
        """Grow the topic to `total` partitions (new ones open lazily, empty)."""
        return await self.registry.add_partitions(name, total, validate_only=validate_only)

    async def topic_by_id(self, tenant: str, namespace: str, topic_id: str) -> TopicInfo | None:
        """The topic of the namespace with this id (hex), or None. Ids are not indexed: this reads
        every topic of the namespace (cached descriptions cost nothing)."""
        for topic in await self.registry.list_topics(tenant, namespace):
            try:
                info = await self.registry.get_topic(TopicName(tenant, namespace, topic))
            except UnknownTopic:
                continue   # deleted meanwhile
            if info.topic_id == topic_id:
                return info
        return None

    # --- partitions ---------------------------------------------------------------------------

    def open_partition(self, name: TopicName, index: int) -> Partition | None:
        """The partition if it is open here and may be written now (no await); else None, and
        `partition` opens it or says why it cannot."""
        key = (name, index)
        partition = self._partitions.get(key)
        if partition is None or (self.cluster is not None and self.cluster.suspended):
            return None
        self._partitions.move_to_end(key)
        self._last_used[key] = time.monotonic()
        return partition

    async def partition(self, name: TopicName, index: int) -> Partition:
        key = (name, index)
        partition = self.open_partition(name, index)
        if partition is not None:
            return partition
        try:
            if key in self._partitions:     # open, but this broker's cluster session is suspended
                raise self.not_owner(name, index)
            partition = await self._opening(key, lambda: self._open_owned(name, index))
        except CoreError:
            self._refused_opening(key)
            raise
        partition.refused_at(self._refusals.pop(key, None))
        self._partitions[key] = partition
        self._epochs[key] = partition.leader_epoch
        self._last_used[key] = time.monotonic()
        if len(self._partitions) > MAX_OPEN_PARTITIONS:
            await self._close_oldest(len(self._partitions) - MAX_OPEN_PARTITIONS)
        return partition

    async def readable(self, name: TopicName, index: int) -> Partition:
        """The partition to read from: this broker's own, or on a read-only broker a read replica
        following the owner's log (core/replicas.py)."""
        if self.replicas is None:
            return await self.partition(name, index)
        return await self.replicas.partition(name, index)

    async def _open_owned(self, name: TopicName, index: int) -> Partition:
        self._check_owner(name, index)
        partition = await self._open(name, index)
        if self.cluster is not None and not self._owns(name, index):   # lost while opening
            await partition.close()
            raise self.not_owner(name, index)
        return partition

    async def _open(self, name: TopicName, index: int) -> Partition:
        info = await self.registry.get_topic(name)
        if not 0 <= index < info.partitions:
            raise UnknownTopic(f"topic {name} has no partition {index}")
        meter = await self.meters.load(name.tenant, name.namespace)
        config = self.effective_config(info, meter.policies)
        with storage_errors():
            managed = await self.logs.open_log(name.partition_log(index), retention_policy(config))
        metadata = self.owner_metadata(partition_bundle(name.tenant, name.namespace, name.topic, index))
        partition = Partition(name.path, index, managed, config, self.clock,
                              AbortedIndexStore(metadata, info.topic_id, index), ProducerNotes(metadata, info.topic_id, index),
                              snapshots=ProducerSnapshots(metadata, info.topic_id, index))
        partition.meter = meter
        await partition.load_producer_states()
        return partition

    def _refused_opening(self, key: tuple[TopicName, int]) -> None:
        """Remember when a partition could not be had here (not owned yet, storage away): a client's
        batch refused then may be missing from the next one's sequence (Partition.check_sequence)."""
        now_ms = self.clock.now_ms()
        self._refusals[key] = now_ms
        if len(self._refusals) > MAX_REMEMBERED_REFUSALS:
            for stale in [k for k, at in self._refusals.items() if now_ms - at > GAP_AFTER_REFUSAL_MS]:
                del self._refusals[stale]

    def leader_epoch(self, name: TopicName, index: int) -> int:
        """The partition's leader epoch as far as this broker knows it without opening it: -1 unless
        it serves the partition and opened it since it took it over."""
        return self._epochs.get((name, index), -1)

    def serves(self, name: TopicName, index: int) -> bool:
        """Whether this broker owns (or, alone, is) the partition's writer: a read-only broker never is."""
        if self.replicas is not None:
            return False
        return self.cluster is None or (not self.cluster.suspended and self._owns(name, index))

    def _owns(self, name: TopicName, index: int) -> bool:
        return self.cluster.owns(partition_bundle(name.tenant, name.namespace, name.topic, index))

    def _check_owner(self, name: TopicName, index: int) -> None:
        if self.cluster is not None and not self._owns(name, index):
            raise self.not_owner(name, index)

    def not_owner(self, name: TopicName, index: int) -> NotOwner:
        """The error for a partition another broker serves, naming that broker."""
        owner = self.cluster.owner(partition_bundle(name.tenant, name.namespace, name.topic, index))
        where = "no broker at the moment" if owner is None else owner.describe()
        return NotOwner(f"partition {name}-{index} is served by {where}, not by broker {self.cluster.local.id}")

    async def _close_bundle(self, bundle: Bundle) -> None:
        for key in [k for k in self._epochs if bundle.holds_partition(k[0].tenant, k[0].namespace, k[0].topic, k[1])]:
            del self._epochs[key]   # another broker may own it before this one opens it again
        for key in [k for k in self._partitions
                    if bundle.holds_partition(k[0].tenant, k[0].namespace, k[0].topic, k[1])]:
            partition = self._partitions.pop(key)
            self._last_used.pop(key, None)
            try:
                await partition.close()
            except Exception as exc:
                log.warning("closing partition %s-%d failed: %s", key[0], key[1], exc)

    async def _take_bundle(self, bundle: Bundle) -> None:
        await self._close_bundle(bundle)
        # Called just before the bundle counts as owned: the takeover runs once this acquisition is done.
        task = asyncio.get_running_loop().create_task(self._open_abandoned(bundle), name=f"take-over-{bundle}")
        self._takeovers.add(task)
        task.add_done_callback(self._takeovers.discard)

    async def _open_abandoned(self, bundle: Bundle) -> None:
        """Open now every partition of the bundle whose log the previous owner left open: opening
        fences its ledger, so from here on that owner (if it is only paused) cannot append, rather
        than until the first client asks for the partition here; clients find it open, too. Costs a
        metadata read per partition of the bundle's topics."""
        try:
            for topic in await self.registry.list_topics(bundle.tenant, bundle.namespace):
                name = TopicName(bundle.tenant, bundle.namespace, topic)
                try:
                    info = await self.registry.get_topic(name)
                except UnknownTopic:
                    continue
                for index in range(info.partitions):
                    if (bundle.holds_partition(bundle.tenant, bundle.namespace, topic, index)
                            and (name, index) not in self._partitions
                            and await self.logs.needs_recovery(name.partition_log(index))):
                        await self.partition(name, index)
        except NotOwner:
            pass   # given away again meanwhile
        except Exception as exc:
            log.warning("taking over the partitions of bundle %s failed: %s", bundle, exc)

    async def default_partitions(self, tenant: str, namespace: str, fallback: int) -> int:
        """Partitions of a topic created without a count: the namespace's policy, else `fallback`."""
        return (await self.meters.load(tenant, namespace)).policies.default_partitions or fallback

    async def _max_connections(self, tenant: str, namespace: str) -> int | None:
        return (await self.meters.load(tenant, namespace)).policies.max_connections

    def _apply_policies(self, meter: NamespaceMeter) -> None:
        """A namespace's policies were read: trace on or off, open partitions retain accordingly."""
        if meter.policies.trace and meter.tracer is None:
            meter.tracer = Tracer(self, meter.tenant, meter.namespace)
        elif not meter.policies.trace:
            meter.tracer = None
        for (name, _), partition in self._partitions.items():
            if (name.tenant, name.namespace) == (meter.tenant, meter.namespace):
                info = self.registry.cached(name)
                if info is not None:
                    partition.config = self.effective_config(info, meter.policies)
                    partition.log.policy = retention_policy(partition.config)

    async def _close_oldest(self, count: int) -> None:
        for _ in range(count):
            key, partition = self._partitions.popitem(last=False)
            self._last_used.pop(key, None)
            await partition.close()

    def bundle_traffic(self) -> dict[str, tuple[float, float]]:
        """Messages appended and bytes appended or read per bundle path, counted by the partitions
        open here since they opened: what this broker's load reports are made of."""
        traffic: dict[str, tuple[float, float]] = {}
        for (name, index), partition in self._partitions.items():
            path = partition_bundle(name.tenant, name.namespace, name.topic, index).path
            messages, size = traffic.get(path, (0, 0))
            traffic[path] = (messages + partition.messages_in, size + partition.bytes_in + partition.bytes_out)
        return traffic

    def partition_weights(self, bundle: Bundle) -> list[tuple[int, float]]:
        """(key hash, load since it opened) of each partition of the bundle open here: where a split
        of the bundle divides its traffic (core/cluster/splits.py)."""
        return [(key_hash(partition_key(name.topic, index)),
                 partition.messages_in * MESSAGE_BYTES + partition.bytes_in + partition.bytes_out)
                for (name, index), partition in self._partitions.items()
                if bundle.holds_partition(name.tenant, name.namespace, name.topic, index)]

    def open_partitions(self) -> list[Partition]:
        """The partitions open in this process now (for metrics)."""
        return list(self._partitions.values())

    # --- cursors ------------------------------------------------------------------------------

    def owner_metadata(self, bundle: Bundle) -> MetadataStore:
        """The metadata store for what this broker writes as the bundle's owner: in a cluster each
        write lands only while this broker's term on the bundle lasts (core/cluster/guarded.py)."""
        cluster = self.cluster
        if cluster is None:
            return self.metadata
        return GuardedMetadata(self.metadata, lambda: cluster.guard(bundle))

    async def cursor(self, name: TopicName, index: int, cursor_name: str, *, writer: Bundle | None = None,
                     initial_offset: int = 0) -> Cursor:
        """A subscription's cursor, written as the owner of `writer` (by default the partition's bundle;
        a consumer group's cursors are written by its coordinator)."""
        writer = writer or partition_bundle(name.tenant, name.namespace, name.topic, index)
        return await Cursor.load(self.owner_metadata(writer), self.clock, name, index, cursor_name,
                                 initial_offset=initial_offset)

    # --- background ---------------------------------------------------------------------------

    async def _sweep(self) -> None:
        while True:
            await self.clock.sleep(self._retention_check_s)
            await self.enforce_retention()
            await self.close_idle(IDLE_CLOSE_S)
            if self.replicas is not None:
                await self.replicas.close_idle(IDLE_CLOSE_S)

    async def enforce_retention(self) -> None:
        now_ms = self.clock.now_ms()
        for key, partition in list(self._partitions.items()):
            try:
                await partition.enforce_retention(now_ms)
                await delete_consumed(self.metadata, self.clock, key[0], partition)
                await enforce_backlog_quota(self.metadata, self.clock, key[0], partition)
            except Exception as exc:
                log.warning("retention of %s-%d failed: %s", key[0], key[1], exc)

    async def delete_consumed(self, name: TopicName, index: int) -> None:
        """Now rather than at the next sweep: with retention.consumed, drop what every
        subscription of the partition consumed (core/retention.py)."""
        partition = await self.partition(name, index)
        with storage_errors():
            await delete_consumed(self.metadata, self.clock, name, partition)

    async def close_idle(self, idle_s: float) -> None:
        deadline = time.monotonic() - idle_s
        for key in [k for k, used in self._last_used.items() if used < deadline]:
            partition = self._partitions.pop(key, None)
            self._last_used.pop(key, None)
            if partition is not None:
                await partition.close()

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for task in self._takeovers:
            task.cancel()
        if self.mailbox is not None:
            self.mailbox.close()
        self.access.close()
        self.audit.close()
        try:
            await self.delayed.close()
        except Exception as exc:
            log.warning("closing the delayed messages failed: %s", exc)
        for meter in self.meters.all():   # trace events still pending go to their topic first
            if meter.tracer is not None:
                await meter.tracer.close()
        if self.replicas is not None:
            await self.replicas.close()
        partitions, self._partitions = list(self._partitions.values()), OrderedDict()
        self._last_used.clear()
        for partition in partitions:
            try:
                await partition.close()
            except Exception as exc:
                log.warning("closing partition %s-%d failed: %s", partition.topic, partition.index, exc)


def _namespace_defaults(policies: NamespacePolicies) -> dict[str, str]:
    """The namespace's retention, for topics that set none of their own."""
    defaults = {}
    if policies.retention_ms is not None:
        defaults["retention.ms"] = str(policies.retention_ms)
    if policies.retention_bytes is not None:
        defaults["retention.bytes"] = str(policies.retention_bytes)
    return defaults

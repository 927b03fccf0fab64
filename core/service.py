"""The core as one object: the registry, open partitions, cursors, delayed messages and the retention
sweep.

Partitions open lazily on first use and close again after being idle (or when too many are open),
so the number of topics does not bound memory; reopening an idle partition costs one metadata read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict

from core.clock import Clock, SystemClock
from core.connections import ClientConnections
from core.cursor import Cursor
from core.delayed.service import DelayedService
from core.errors import UnknownTopic
from core.meters import NamespaceMeter, NamespaceMeters
from core.names import TopicName
from core.partition import Partition, retention_policy, storage_errors
from core.policies import NamespacePolicies
from core.registry import Registry, TopicInfo
from core.tenancy import Tenancy
from core.topic_config import EffectiveConfig
from core.trace import Tracer
from core.transactions.aborted_index import AbortedIndexStore
from storage.api import ManagedLogFactory, MetadataStore

log = logging.getLogger("gateway.core")

MAX_OPEN_PARTITIONS = 20_000
IDLE_CLOSE_S = 600.0
RETENTION_CHECK_S = 60.0


class Core:
    def __init__(self, metadata: MetadataStore, logs: ManagedLogFactory, clock: Clock | None = None) -> None:
        self.metadata = metadata
        self.logs = logs
        self.clock = clock or SystemClock()
        self.registry = Registry(metadata, self.clock)
        self._partitions: OrderedDict[tuple[TopicName, int], Partition] = OrderedDict()
        self._last_used: dict[tuple[TopicName, int], float] = {}
        self._opening: dict[tuple[TopicName, int], asyncio.Future] = {}
        self._sweeper: asyncio.Task | None = None
        self.delayed = DelayedService(self)     # delayed messages: held until due, then routed
        self.connections = ClientConnections(metadata, self._max_connections)   # this process's clients
        self.tenancy = Tenancy(self)            # tenants and namespaces at runtime, their policies
        self.meters = NamespaceMeters(metadata)  # each namespace's rates, rate limits and policies
        self.meters.on_policies(self._apply_policies)

    async def start(self) -> None:
        await self.registry.start()
        await self.delayed.start()
        self._sweeper = asyncio.create_task(self._sweep(), name="core-retention")

    # --- topics -------------------------------------------------------------------------------

    async def create_topic(self, name: TopicName, partitions: int, configs: dict[str, str] | None = None,
                           *, validate_only: bool = False) -> TopicInfo:
        return await self.registry.create_topic(name, partitions, configs, validate_only=validate_only)

    async def delete_topic(self, name: TopicName) -> None:
        info = await self.registry.delete_topic(name)
        for index in range(info.partitions):
            partition = self._partitions.pop((name, index), None)
            self._last_used.pop((name, index), None)
            if partition is not None:
                await partition.close()
            await self.logs.delete_log(name.partition_log(index))
            for cursor in await self.metadata.children(f"/cursors/{name.path}/{index}"):
                await (await Cursor.load(self.metadata, self.clock, name, index, cursor)).delete()

    async def alter_topic_configs(self, name: TopicName, changes: dict[str, str | None], *,
                                  replace_all: bool = False, validate_only: bool = False) -> TopicInfo:
        info = await self.registry.alter_configs(name, changes, replace_all=replace_all, validate_only=validate_only)
        if not validate_only:
            for index in range(info.partitions):
                partition = self._partitions.get((name, index))
                if partition is not None:
                    partition.config = info.effective
                    partition.log.policy = retention_policy(info.effective)
        return info

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

    async def partition(self, name: TopicName, index: int) -> Partition:
        key = (name, index)
        partition = self._partitions.get(key)
        if partition is not None:
            self._partitions.move_to_end(key)
            self._last_used[key] = time.monotonic()
            return partition
        opening = self._opening.get(key)
        if opening is not None:
            return await asyncio.shield(opening)
        future = asyncio.get_running_loop().create_future()
        self._opening[key] = future
        try:
            partition = await self._open(name, index)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: other waiters re-raise it
            raise
        finally:
            del self._opening[key]
        future.set_result(partition)
        self._partitions[key] = partition
        self._last_used[key] = time.monotonic()
        if len(self._partitions) > MAX_OPEN_PARTITIONS:
            await self._close_oldest(len(self._partitions) - MAX_OPEN_PARTITIONS)
        return partition

    async def _open(self, name: TopicName, index: int) -> Partition:
        info = await self.registry.get_topic(name)
        if not 0 <= index < info.partitions:
            raise UnknownTopic(f"topic {name} has no partition {index}")
        meter = await self.meters.load(name.tenant, name.namespace)
        config = _with_namespace_defaults(info, meter.policies)
        with storage_errors():
            managed = await self.logs.open_log(name.partition_log(index), retention_policy(config))
        partition = Partition(name.path, index, managed, config, self.clock,
                              AbortedIndexStore(self.metadata, info.topic_id, index))
        partition.meter = meter
        await partition.load_producer_states()
        return partition

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
                    partition.config = _with_namespace_defaults(info, meter.policies)
                    partition.log.policy = retention_policy(partition.config)

    async def _close_oldest(self, count: int) -> None:
        for _ in range(count):
            key, partition = self._partitions.popitem(last=False)
            self._last_used.pop(key, None)
            await partition.close()

    def open_partitions(self) -> list[Partition]:
        """The partitions open in this process now (for metrics)."""
        return list(self._partitions.values())

    # --- cursors ------------------------------------------------------------------------------

    async def cursor(self, name: TopicName, index: int, cursor_name: str, *, initial_offset: int = 0) -> Cursor:
        return await Cursor.load(self.metadata, self.clock, name, index, cursor_name, initial_offset=initial_offset)

    # --- background ---------------------------------------------------------------------------

    async def _sweep(self) -> None:
        while True:
            await self.clock.sleep(RETENTION_CHECK_S)
            await self.enforce_retention()
            await self.close_idle(IDLE_CLOSE_S)

    async def enforce_retention(self) -> None:
        now_ms = self.clock.now_ms()
        for key, partition in list(self._partitions.items()):
            try:
                await partition.enforce_retention(now_ms)
            except Exception as exc:
                log.warning("retention of %s-%d failed: %s", key[0], key[1], exc)

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
        try:
            await self.delayed.close()
        except Exception as exc:
            log.warning("closing the delayed messages failed: %s", exc)
        for meter in self.meters.all():   # trace events still pending go to their topic first
            if meter.tracer is not None:
                await meter.tracer.close()
        partitions, self._partitions = list(self._partitions.values()), OrderedDict()
        self._last_used.clear()
        for partition in partitions:
            try:
                await partition.close()
            except Exception as exc:
                log.warning("closing partition %s-%d failed: %s", partition.topic, partition.index, exc)


def _with_namespace_defaults(info: TopicInfo, policies: NamespacePolicies) -> EffectiveConfig:
    """The topic's settings, its namespace's retention where the topic sets none of its own."""
    defaults = {}
    if policies.retention_ms is not None:
        defaults["retention.ms"] = str(policies.retention_ms)
    if policies.retention_bytes is not None:
        defaults["retention.bytes"] = str(policies.retention_bytes)
    return EffectiveConfig.of({**defaults, **info.configs}) if defaults else info.effective

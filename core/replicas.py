"""Read replicas: the partitions a read-only broker serves without owning them.

A read-only broker (seed 000; `gateway serve --role read-only`) holds no bundle and writes nothing.
It serves Fetch for any partition from the shared storage through a follower of the partition's
log (storage's `follow_log`), so consumers close to it — Kafka consumers sent here by KIP-392's
preferred read replica — take load off the owner. A replica serves what the owner acknowledged.
For read_committed readers it learns the transactions from the batches as its log moves on (as
the owner does when it opens a partition, core/partition.py), and its last stable offset never
passes what it learned. Everything that writes goes to the owner. Replicas open on first use and
close when idle.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from core.errors import UnknownTopic
from core.names import TopicName
from core.open_once import OpenOnce
from core.partition import Partition, storage_errors
from core.transactions.aborted_index import AbortedIndexStore

if TYPE_CHECKING:
    from core.service import Core

log = logging.getLogger("gateway.core.replicas")


class ReadReplicas:
    def __init__(self, core: "Core") -> None:
        self._core = core
        self._replicas: dict[tuple[TopicName, int], Partition] = {}
        self._last_used: dict[tuple[TopicName, int], float] = {}
        self._opening = OpenOnce()

    async def partition(self, name: TopicName, index: int) -> Partition:
        key = (name, index)
        replica = self._replicas.get(key)
        if replica is None:
            replica = self._replicas[key] = await self._opening(key, lambda: self._open(name, index))
        self._last_used[key] = time.monotonic()
        return replica

    async def _open(self, name: TopicName, index: int) -> Partition:
        core = self._core
        info = await core.registry.get_topic(name)
        if not 0 <= index < info.partitions:
            raise UnknownTopic(f"topic {name} has no partition {index}")
        meter = await core.meters.load(name.tenant, name.namespace)
        with storage_errors():
            follower = await core.logs.follow_log(name.partition_log(index))
        replica = Partition(name.path, index, follower, core.effective_config(info, meter.policies), core.clock,
                            AbortedIndexStore(core.metadata, info.topic_id, index), read_only=True)
        replica.meter = meter
        try:
            await replica.load_producer_states()
        except BaseException:
            await follower.close()
            raise
        follower.on_append = replica.replica_advanced
        replica.replica_advanced()      # what arrived while it was loading
        return replica

    async def close_idle(self, idle_s: float) -> None:
        now = time.monotonic()
        for key in [k for k, used in self._last_used.items() if now - used > idle_s]:
            await self._close(key)

    async def forget_topic(self, name: TopicName) -> None:
        for key in [k for k in self._replicas if k[0] == name]:
            await self._close(key)

    async def close(self) -> None:
        for key in list(self._replicas):
            await self._close(key)

    async def _close(self, key: tuple[TopicName, int]) -> None:
        replica = self._replicas.pop(key, None)
        self._last_used.pop(key, None)
        if replica is not None:
            try:
                await replica.close()
            except Exception as exc:
                log.warning("closing replica %s-%d failed: %s", key[0], key[1], exc)

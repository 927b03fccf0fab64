"""Delayed messages for the whole core: one store per tenant/namespace, and the deliverers of targets.

A protocol holds a message with `hold(tenant, namespace, record, due_ms, target)`; when it is due,
the deliverer registered for `target.kind` routes and appends it (a queue namespace registers
"exchange"). Stores are created on first use and, at start, for every namespace that has one:

    /delayed/<tenant>/<namespace>    {}    (the namespaces with held messages, so a restart finds them)

Starting loads the stores in the background; a store whose messages fall due before their kind
has a deliverer waits for it.
"""

from __future__ import annotations

import asyncio
import logging

from core.cluster.bundles import Bundle, partition_bundle
from core.delayed.held import Target
from core.delayed.store import SYSTEM_TOPIC, Deliverer, DelayedStore
from core.names import TopicName
from core.records.builder import Record

log = logging.getLogger("gateway.core.delayed")

INDEX = "/delayed"


class DelayedService:
    def __init__(self, core) -> None:
        self._core = core
        self._stores: dict[tuple[str, str], DelayedStore] = {}
        self._deliverers: dict[str, Deliverer] = {}
        self._registered: dict[str, asyncio.Event] = {}
        self._loader: asyncio.Task | None = None
        if core.cluster is not None:
            core.cluster.on_acquire(self._on_acquire)

    def register(self, kind: str, deliverer: Deliverer) -> None:
        """`deliverer` routes the held messages of targets of this kind from now on."""
        self._deliverers[kind] = deliverer
        self._registered.setdefault(kind, asyncio.Event()).set()

    async def deliverer(self, kind: str) -> Deliverer:
        found = self._deliverers.get(kind)
        if found is None:
            await self._registered.setdefault(kind, asyncio.Event()).wait()
            found = self._deliverers[kind]
        return found

    async def start(self) -> None:
        self._loader = asyncio.create_task(self._load_all(), name="delayed-load")

    async def _load_all(self) -> None:
        metadata = self._core.metadata
        try:
            for tenant in await metadata.children(INDEX):
                for namespace in await metadata.children(f"{INDEX}/{tenant}"):
                    self.store(tenant, namespace)
        except Exception as exc:
            log.warning("finding the namespaces with delayed messages failed: %s", exc)

    async def _on_acquire(self, bundle: Bundle) -> None:
        """A namespace's held messages are delivered by the owner of its system topic's bundle: when
        this broker takes that bundle, it starts the store (the previous owner's schedule resumes)."""
        if partition_bundle(bundle.tenant, bundle.namespace, SYSTEM_TOPIC, 0) != bundle:
            return
        if await self._core.metadata.get(f"{INDEX}/{bundle.tenant}/{bundle.namespace}") is None:
            return
        # Called just before the bundle counts as owned: start once this acquisition is done.
        asyncio.get_running_loop().call_soon(self.store, bundle.tenant, bundle.namespace)

    def store(self, tenant: str, namespace: str) -> DelayedStore:
        key = (tenant, namespace)
        store = self._stores.get(key)
        if store is None or store.failed:
            store = DelayedStore(self._core, tenant, namespace, self.deliverer)
            self._stores[key] = store
            store.start()
        return store

    def hold(self, tenant: str, namespace: str, record: Record, due_ms: int, target: Target) -> asyncio.Future:
        """Keep `record` until `due_ms`, then hand it to the deliverer of `target.kind`. The future
        resolves once the record is durable."""
        cluster = self._core.cluster
        if cluster is not None and not cluster.owns(partition_bundle(tenant, namespace, SYSTEM_TOPIC, 0)):
            raise self._core.not_owner(TopicName(tenant, namespace, SYSTEM_TOPIC), 0)   # refused now, not lost
        return self.store(tenant, namespace).hold(record, due_ms, target)

    async def close(self) -> None:
        if self._loader is not None:
            self._loader.cancel()
        stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            await store.close()

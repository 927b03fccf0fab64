"""Delayed messages for the whole core: one store per tenant/namespace, and the deliverers of targets.

A protocol holds a message with `hold(tenant, namespace, record, due_ms, target)`; when it is due,
the deliverer registered for `target.kind` routes and appends it (a queue namespace registers
"exchange"). Stores are created on first use and, at start, for every namespace that has one:

    /delayed/<tenant>/<namespace>    {}    (the namespaces with held messages, so a restart finds them)

Starting loads the stores in the background; a store whose messages fall due before their kind
has a deliverer waits for it.

The core itself delivers one kind, PARTITION ("<topic>/<partition>"): a record held for a topic's
partition (Kafka's deliver-at-ms) is appended at the end of that partition when due.

A held message's id is its offset in the namespace's system topic (what `hold` resolves to); the
admin API cancels by it and counts what is pending per target.
"""

from __future__ import annotations

import asyncio
import logging

from core.cluster.bundles import Bundle, partition_bundle
from core.delayed.held import Target
from core.delayed.remote import DelayedRequests, RemoteStore, append_released
from core.delayed.store import MAX_IN_MEMORY, SYSTEM_TOPIC, DelayedStore, Deliverer
from core.names import TopicName
from core.records.builder import Record

log = logging.getLogger("gateway.core.delayed")

INDEX = "/delayed"
PARTITION = "partition"


class PartitionDeliverer:
    """Held records of a topic's partition go back to the end of that partition."""

    def __init__(self, core) -> None:
        self._core = core

    async def route(self, tenant: str, namespace: str, name: str, record: Record) -> list[tuple[str, int]]:
        topic, _, index = name.rpartition("/")
        return [(topic, int(index))] if index.isdigit() else []

    def publish(self, tenant: str, namespace: str, topic: str, partition: int, records: list[Record]) -> list:
        return [self._append(TopicName(tenant, namespace, topic), partition, records)]

    async def _append(self, topic: TopicName, index: int, records: list[Record]) -> int:
        return await append_released(self._core, topic, index, records)


def partition_target(topic: str, partition: int) -> Target:
    return Target(PARTITION, f"{topic}/{partition}")


def partition_of(target: Target, topic: str) -> int | None:
    """The partition a PARTITION target names, if it is one of `topic`'s."""
    name, _, index = target.name.rpartition("/")
    return int(index) if target.kind == PARTITION and name == topic and index.isdigit() else None


class DelayedService:
    def __init__(self, core, *, memory_keys: int = MAX_IN_MEMORY) -> None:
        """`memory_keys`: the keys of held messages each namespace keeps in memory (the rest wait
        in runs on storage)."""
        self._core = core
        self.memory_keys = memory_keys
        self._stores: dict[tuple[str, str], DelayedStore] = {}
        self._deliverers: dict[str, Deliverer] = {}
        self._registered: dict[str, asyncio.Event] = {}
        self._loader: asyncio.Task | None = None
        self._remote: dict[tuple[str, str], RemoteStore] = {}
        self._starting: set[Bundle] = set()      # store bundles taken, to start once served
        if core.cluster is not None:
            core.cluster.on_acquire(self._on_acquire)
            core.cluster.on_serving(self._on_serving)
            core.cluster.on_release(self._on_release)
        if core.peers is not None:
            DelayedRequests(core, self).register(core.peers)
        self.register(PARTITION, PartitionDeliverer(core))

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
        if self._core.cluster is None:      # in a cluster, a store starts with its bundle (_on_acquire)
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
        if not bundle.holds_partition(bundle.tenant, bundle.namespace, SYSTEM_TOPIC, 0):
            return
        if await self._core.metadata.get(f"{INDEX}/{bundle.tenant}/{bundle.namespace}") is not None:
            self._starting.add(bundle)      # once the bundle counts as owned (_on_serving)

    def _on_serving(self, bundle: Bundle) -> None:
        if bundle in self._starting:
            self._starting.discard(bundle)
            self.store(bundle.tenant, bundle.namespace)

    async def _on_release(self, bundle: Bundle) -> None:
        """The bundle goes to another broker: so does its store (a later return starts it afresh)."""
        if not bundle.holds_partition(bundle.tenant, bundle.namespace, SYSTEM_TOPIC, 0):
            return
        self._starting.discard(bundle)
        store = self._stores.pop((bundle.tenant, bundle.namespace), None)
        if store is not None:
            await store.close()

    def store(self, tenant: str, namespace: str) -> DelayedStore:
        key = (tenant, namespace)
        store = self._stores.get(key)
        if store is None or store.failed:
            store = DelayedStore(self._core, tenant, namespace, self.deliverer, limit=self.memory_keys)
            self._stores[key] = store
            store.start()
        return store

    def _remote_store(self, tenant: str, namespace: str) -> RemoteStore | None:
        """In a cluster, the way to the broker serving the namespace's store if not this one."""
        bundle = partition_bundle(tenant, namespace, SYSTEM_TOPIC, 0)
        cluster = self._core.cluster
        if cluster is None or cluster.owns(bundle):
            return None
        if self._core.peers is None:
            raise self._core.not_owner(TopicName(tenant, namespace, SYSTEM_TOPIC), 0)   # refused now, not lost
        remote = self._remote.get((tenant, namespace))
        if remote is None:
            remote = self._remote[(tenant, namespace)] = RemoteStore(self._core, tenant, namespace, SYSTEM_TOPIC)
        return remote

    def local_store(self, tenant: str, namespace: str) -> DelayedStore:
        """The namespace's store, which this broker must serve (NotOwner if it does not)."""
        self.check_serving(tenant, namespace)
        return self.store(tenant, namespace)

    def check_serving(self, tenant: str, namespace: str) -> None:
        cluster = self._core.cluster
        if cluster is not None and not cluster.owns(partition_bundle(tenant, namespace, SYSTEM_TOPIC, 0)):
            raise self._core.not_owner(TopicName(tenant, namespace, SYSTEM_TOPIC), 0)

    def intake(self, tenant: str, namespace: str) -> DelayedStore | RemoteStore:
        """What a connection holding messages here waits on for back-pressure (`wait_writable`)."""
        return self._remote_store(tenant, namespace) or self.store(tenant, namespace)

    def hold(self, tenant: str, namespace: str, record: Record, due_ms: int, target: Target, *,
             txn: int | None = None) -> asyncio.Future:
        """Keep `record` until `due_ms`, then hand it to the deliverer of `target.kind`. The future
        resolves to its id once the record is durable. `txn`: the producer id of the transaction it
        belongs to (released only if that commits, see `end_transaction`). In a cluster, held by
        the broker serving the namespace's store."""
        remote = self._remote_store(tenant, namespace)
        if remote is not None:
            return remote.hold(record, due_ms, target, txn)
        return self.store(tenant, namespace).hold(record, due_ms, target, txn)

    def hold_many(self, tenant: str, namespace: str, items: list[tuple[Record, int]], target: Target, *,
                  txn: int | None = None) -> list[asyncio.Future]:
        """`hold` for many (record, due) pairs of one target, without their ids: futures (fewer
        than the records) that resolve once all of them are durable."""
        remote = self._remote_store(tenant, namespace)
        if remote is not None:
            return [remote.hold_many(items, target, txn)]
        store = self.store(tenant, namespace)
        futures = {id(future): future for future in
                   (store.hold(record, due_ms, target, txn, with_id=False) for record, due_ms in items)}
        return list(futures.values())

    async def end_transaction(self, tenant: str, namespace: str, producer_id: int, commit: bool) -> None:
        """A transaction of `producer_id` ends (before its markers are written): its held messages
        in this namespace are held for good (commit) or dropped (abort)."""
        remote = self._remote_store(tenant, namespace)
        if remote is not None:
            await remote.end_transaction(producer_id, commit)
            return
        store = await self.existing(tenant, namespace)
        if store is not None:
            await store.end_transaction(producer_id, commit)

    async def existing(self, tenant: str, namespace: str) -> DelayedStore | None:
        """The namespace's store, loaded, if it ever held a message (None: it never did). In a
        cluster, only the broker serving it has it (NotOwner elsewhere)."""
        self.check_serving(tenant, namespace)
        store = self._stores.get((tenant, namespace))
        if store is None:
            if await self._core.metadata.get(f"{INDEX}/{tenant}/{namespace}") is None:
                return None
            store = self.store(tenant, namespace)
        await store.wait_loaded()
        return store

    async def pending(self, tenant: str, namespace: str) -> dict[str, int]:
        """Pending messages per target (Target.encode() as text)."""
        remote = self._remote_store(tenant, namespace)
        if remote is not None:
            return await remote.pending()
        store = await self.existing(tenant, namespace)
        return store.pending() if store is not None else {}

    async def cancel(self, tenant: str, namespace: str, message_id: int, *, topic: str | None = None) -> bool:
        """Cancel the pending message with this id (only if held for a partition of `topic`, when
        given); False if none is pending under it."""
        remote = self._remote_store(tenant, namespace)
        if remote is not None:
            return await remote.cancel(message_id, topic)
        store = await self.existing(tenant, namespace)
        accept = None if topic is None else (lambda target: partition_of(target, topic) is not None)
        return store is not None and await store.cancel(message_id, accept)

    async def close(self) -> None:
        if self._loader is not None:
            self._loader.cancel()
        stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            await store.close()


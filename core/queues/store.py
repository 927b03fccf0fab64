"""Exchanges, queues and bindings of one namespace in the metadata store.

    /exchanges/<tenant>/<namespace>/<storage key>   Exchange.to_doc()
    /queues/<tenant>/<namespace>/<storage key>      QueueInfo.to_doc()
    /bindings/<tenant>/<namespace>/<binding id>     Binding.to_doc()
    /topology/<tenant>/<namespace>                  rewritten after every change (a cluster's
                                                    brokers watch it and read the rows again)

Storage keys are naming.storage_key(name); a binding's id is a hash of all its fields, so binding
the same thing twice writes one row. Every write is durable when it returns.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from core.partition import storage_errors
from core.queues.exchange import Binding, Exchange
from core.queues.naming import storage_key
from core.queues.queue import QueueInfo
from storage.api import MetadataStore, NodeExists, NoNode


@dataclass(frozen=True, slots=True)
class StoredNamespace:
    exchanges: list[Exchange]
    queues: list[QueueInfo]
    bindings: list[Binding]


class NamespaceStore:
    def __init__(self, metadata: MetadataStore, tenant: str, namespace: str) -> None:
        self._metadata = metadata
        self._suffix = f"{tenant}/{namespace}"

    def _path(self, kind: str, key: str) -> str:
        return f"/{kind}/{self._suffix}/{key}"

    async def load(self) -> StoredNamespace:
        with storage_errors():
            return StoredNamespace(
                [Exchange.from_doc(doc) for doc in await self._all("exchanges")],
                [QueueInfo.from_doc(doc) for doc in await self._all("queues")],
                [Binding.from_doc(doc) for doc in await self._all("bindings")],
            )

    async def _all(self, kind: str) -> list[dict]:
        docs = []
        for key in await self._metadata.children(f"/{kind}/{self._suffix}"):
            node = await self._metadata.get(self._path(kind, key))
            if node is not None:
                docs.append(json.loads(node.value))
        return docs

    async def put_exchange(self, exchange: Exchange) -> None:
        await self._put("exchanges", storage_key(exchange.name), exchange.to_doc())

    async def create_exchange(self, exchange: Exchange) -> Exchange | None:
        """Store `exchange` unless an exchange of its name is stored: then that one, unchanged (two
        brokers declaring one name at once: the first write wins, as in a RabbitMQ cluster)."""
        path = self._path("exchanges", storage_key(exchange.name))
        while True:
            with storage_errors():
                try:
                    await self._metadata.create(path, json.dumps(exchange.to_doc(), separators=(",", ":")).encode())
                    return None
                except NodeExists:
                    pass
            stored = await self.get_exchange(exchange.name)
            if stored is not None:
                return stored          # (else deleted meanwhile: create it after all)

    async def delete_exchange(self, name: str) -> None:
        await self._delete("exchanges", storage_key(name))

    async def announce(self) -> None:
        """Tell the brokers that watch this namespace that its rows changed."""
        with storage_errors():
            await self._metadata.put(f"/topology/{self._suffix}", b"")

    def watch(self, callback: Callable[[str], None]) -> Callable[[], None]:
        return self._metadata.watch(f"/topology/{self._suffix}", callback)

    async def get_exchange(self, name: str) -> Exchange | None:
        with storage_errors():
            node = await self._metadata.get(self._path("exchanges", storage_key(name)))
        return None if node is None else Exchange.from_doc(json.loads(node.value))

    async def get_queue(self, name: str) -> QueueInfo | None:
        with storage_errors():
            node = await self._metadata.get(self._path("queues", storage_key(name)))
        return None if node is None else QueueInfo.from_doc(json.loads(node.value))

    async def put_queue(self, info: QueueInfo) -> None:
        await self._put("queues", storage_key(info.name), info.to_doc())

    async def delete_queue(self, name: str) -> None:
        await self._delete("queues", storage_key(name))

    async def put_binding(self, binding: Binding) -> None:
        await self._put("bindings", binding.binding_id, binding.to_doc())

    async def delete_binding(self, binding: Binding) -> None:
        await self._delete("bindings", binding.binding_id)

    async def _put(self, kind: str, key: str, doc: dict) -> None:
        with storage_errors():
            await self._metadata.put(self._path(kind, key), json.dumps(doc, separators=(",", ":")).encode())

    async def _delete(self, kind: str, key: str) -> None:
        with storage_errors():
            try:
                await self._metadata.delete(self._path(kind, key))
            except NoNode:
                pass

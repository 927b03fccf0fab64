"""Where transactions survive a restart (Kafka keeps them in __transaction_state): one metadata record
per transactional id, rewritten on every state change, durable before the change is answered.

    /transactions/<tenant>/<namespace>/<stored name>   JSON, Transaction.to_dict() (state.py):
        {"producer_id": int, "producer_epoch": int, "timeout_ms": int, "state": "Ongoing", ...,
         "started_ms": int, "partitions": [[topic, index], ...], "groups": [group_id, ...],
         "offsets": {group_id: [[topic, index, offset, metadata], ...]}}

The tenant and namespace levels are nodes of their own (empty), so the records can be listed.
A transactional id's stored name is "txn." followed by the id with every character outside
[A-Za-z0-9_-] written as ".xx" per UTF-8 byte, so any id maps to one path component and back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from core.errors import NotCoordinator
from core.names import MAX_NAME, escaped_name, unescaped_name
from core.partition import storage_errors
from core.transactions.errors import InvalidTransactionalId
from core.transactions.state import Transaction
from storage.api import Fenced, MetadataStore

ROOT = "/transactions"
PREFIX = "txn."


@dataclass(frozen=True, slots=True, order=True)
class TxnKey:
    tenant: str
    namespace: str
    transactional_id: str


def stored_name(transactional_id: str) -> str:
    if not transactional_id:
        raise InvalidTransactionalId("the transactional id must not be empty")
    name = escaped_name(PREFIX, transactional_id)
    if len(name) > MAX_NAME:
        raise InvalidTransactionalId(f"transactional id {transactional_id[:40]!r}... is too long to store")
    return name


def transactional_id_of(name: str) -> str | None:
    return unescaped_name(PREFIX, name)


class TransactionStore:
    def __init__(self, metadata: MetadataStore, writer: Callable[[TxnKey], MetadataStore] | None = None) -> None:
        """`writer(key)`: the store to write a transactional id's record through (its coordinator's
        guarded view in a cluster); reads go to `metadata`."""
        self._metadata = metadata
        self._writer = writer or (lambda key: metadata)
        self._listed: set[tuple[str, str]] = set()   # namespaces whose levels are known to exist

    @staticmethod
    def path(key: TxnKey) -> str:
        return f"{ROOT}/{key.tenant}/{key.namespace}/{stored_name(key.transactional_id)}"

    async def save(self, key: TxnKey, txn: Transaction) -> None:
        writer = self._writer(key)
        with storage_errors():
            try:
                if (key.tenant, key.namespace) not in self._listed:
                    await writer.put(f"{ROOT}/{key.tenant}", b"")
                    await writer.put(f"{ROOT}/{key.tenant}/{key.namespace}", b"")
                    self._listed.add((key.tenant, key.namespace))
                await writer.put(self.path(key), json.dumps(txn.to_dict(), separators=(",", ":")).encode())
            except Fenced as exc:
                raise NotCoordinator(f"transactional id {key.transactional_id}: {exc}") from exc

    async def load_all(self) -> dict[TxnKey, Transaction]:
        found: dict[TxnKey, Transaction] = {}
        with storage_errors():
            for tenant in await self._metadata.children(ROOT):
                for namespace in await self._metadata.children(f"{ROOT}/{tenant}"):
                    self._listed.add((tenant, namespace))
                    found.update(await self.load_namespace(tenant, namespace))
        return found

    async def load_namespace(self, tenant: str, namespace: str) -> dict[TxnKey, Transaction]:
        found: dict[TxnKey, Transaction] = {}
        with storage_errors():
            for name in await self._metadata.children(f"{ROOT}/{tenant}/{namespace}"):
                transactional_id = transactional_id_of(name)
                node = await self._metadata.get(f"{ROOT}/{tenant}/{namespace}/{name}")
                if transactional_id is not None and node is not None:
                    found[TxnKey(tenant, namespace, transactional_id)] = Transaction.from_dict(json.loads(node.value))
        return found

    async def load(self, key: TxnKey) -> Transaction | None:
        """One transactional id's record as stored now, whichever broker wrote it last (None: none)."""
        with storage_errors():
            node = await self._metadata.get(self.path(key), latest=True)
        return None if node is None else Transaction.from_dict(json.loads(node.value))

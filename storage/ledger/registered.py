"""The bookies registered in the metadata store, as a ledger client's BookieDirectory.

The registrations (storage/bookie/registration.py) are read again every `refresh_interval_s` and
whenever one of them changes. A bookie that vanished from the registry is no longer a candidate for
new ensembles, but its last known address is kept for reads: ledgers it holds stay readable while it
is only cut off from the metadata store.
"""

from __future__ import annotations

import asyncio
import logging

from storage.api import MetadataStore, NotEnoughBookies, StorageError
from storage.bookie.registration import BookieRegistration, registered_bookies
from storage.bookie.remote import RemoteBookie
from storage.ledger.placement import DEFAULT_RACK, BookieInfo
from storage.node_tls import NodeTls

log = logging.getLogger("gateway.storage.ledger.registered")

DEFAULT_REFRESH_INTERVAL_S = 1.0


class RegisteredBookies:
    def __init__(self, metadata: MetadataStore, secret: bytes, *, request_timeout_s: float,
                 refresh_interval_s: float = DEFAULT_REFRESH_INTERVAL_S, tls: NodeTls | None = None) -> None:
        self._metadata = metadata
        self._tls = tls
        self._secret = secret
        self._request_timeout_s = request_timeout_s
        self._refresh_interval_s = refresh_interval_s
        self._live: dict[str, BookieRegistration] = {}
        self._known: dict[str, BookieRegistration] = {}
        self._stores: dict[str, RemoteBookie] = {}
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.create_task(self._refresh_forever(), name="bookie-registry")

    async def refresh(self) -> None:
        live = {r.bookie_id: r for r in await registered_bookies(self._metadata)}
        for bookie_id, registration in live.items():
            old = self._known.get(bookie_id)
            if old is not None and (old.host, old.port) != (registration.host, registration.port):
                store = self._stores.pop(bookie_id, None)   # it moved: talk to the new address
                if store is not None:
                    await store.close()
            self._known[bookie_id] = registration
        if set(live) != set(self._live):
            log.info("bookies available: %s", ", ".join(sorted(live)) or "none")
        self._live = live

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_interval_s)
            try:
                await self.refresh()
            except StorageError as exc:
                log.warning("could not read the bookie registry: %s", exc)

    def entry_store(self, bookie_id: str) -> RemoteBookie:
        store = self._stores.get(bookie_id)
        if store is None:
            registration = self._known.get(bookie_id)
            if registration is None:
                raise NotEnoughBookies(f"bookie {bookie_id} is not registered")
            store = RemoteBookie(bookie_id, registration.host, registration.port, self._secret,
                                 request_timeout_s=self._request_timeout_s, tls=self._tls)
            self._stores[bookie_id] = store
        return store

    def candidates(self) -> list[BookieInfo]:
        return [BookieInfo(r.bookie_id, r.rack, not r.read_only) for r in self._live.values()]

    def rack_of(self, bookie_id: str) -> str:
        registration = self._known.get(bookie_id)
        return DEFAULT_RACK if registration is None else registration.rack

    def is_live(self, bookie_id: str) -> bool:
        return bookie_id in self._live

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for store in self._stores.values():
            await store.close()
        self._stores.clear()

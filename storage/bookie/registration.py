"""A bookie's registration in the metadata store: how ledger clients find it and learn its state.

    /bookies-available/<bookie id>   ephemeral, JSON {"host", "port", "rack", "instance_id", "read_only"}

The node lives as long as the bookie's metadata session: a bookie that dies or is cut off from the
metadata store past its session timeout disappears from the candidates for new ensembles (and the
auditor starts counting its grace period). After a lost session the bookie registers again; turning
read-only (a failed fsync) is published at once so no new ledger is placed on it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import asdict, dataclass, replace

from storage.api import MetadataStore, NodeExists, NoNode, SessionState, StorageError

log = logging.getLogger("gateway.storage.bookie.registration")

REGISTRY = "/bookies-available"


@dataclass(frozen=True, slots=True)
class BookieRegistration:
    bookie_id: str
    host: str
    port: int
    rack: str
    instance_id: str
    read_only: bool = False

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "BookieRegistration":
        return cls(**json.loads(raw))


def registration_path(bookie_id: str) -> str:
    return f"{REGISTRY}/{bookie_id}"


class Registration:
    """Keeps one bookie registered for as long as it runs."""

    def __init__(self, metadata: MetadataStore, registration: BookieRegistration) -> None:
        self._metadata = metadata
        self.current = registration
        self._cancel_session_events = None
        self._reregistering: asyncio.Task | None = None

    async def start(self) -> None:
        await self._create()
        self._cancel_session_events = self._metadata.on_session_event(self._on_session)

    async def _create(self) -> None:
        path = registration_path(self.current.bookie_id)
        try:
            await self._metadata.create(path, self.current.to_json(), ephemeral=True)
        except NodeExists:
            # Our own node from a session that has not expired yet (a quick restart): it will vanish
            # with that session, so take it over by deleting and creating it in ours.
            try:
                await self._metadata.delete(path)
            except NoNode:
                pass
            await self._metadata.create(path, self.current.to_json(), ephemeral=True)

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST:
            log.warning("bookie %s lost its metadata session: registering again", self.current.bookie_id)
            if self._reregistering is None or self._reregistering.done():
                self._reregistering = asyncio.ensure_future(self._register_again())

    async def _register_again(self) -> None:
        delay_s = 0.2
        while True:
            try:
                await self._create()
                return
            except StorageError as exc:
                log.warning("bookie %s could not register again (%s); retrying", self.current.bookie_id, exc)
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, 5.0)

    async def set_read_only(self, read_only: bool) -> None:
        if read_only == self.current.read_only:
            return
        self.current = replace(self.current, read_only=read_only)
        await self._metadata.put(registration_path(self.current.bookie_id), self.current.to_json())

    async def close(self) -> None:
        if self._cancel_session_events is not None:
            self._cancel_session_events()
        if self._reregistering is not None:
            self._reregistering.cancel()
        try:
            await self._metadata.delete(registration_path(self.current.bookie_id))
        except (NoNode, StorageError):
            pass


async def registered_bookies(metadata: MetadataStore) -> list[BookieRegistration]:
    found = []
    for bookie_id in await metadata.children(REGISTRY):
        node = await metadata.get(registration_path(bookie_id))
        if node is not None:
            found.append(BookieRegistration.from_json(node.value))
    return found

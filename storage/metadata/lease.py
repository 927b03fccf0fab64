"""An exclusive lease on an ephemeral node: one holder in the cluster at a time, the others stand by.

    <path>   ephemeral, value = the holder's token (random, one per Lease object)

`run(work)` contends for the node for as long as it runs. Once it holds the node it runs `work()`
as a task; the moment the metadata session is SUSPENDED or LOST that task is cancelled, before any
other contender can have taken over (ZooKeeper deletes the node only when the session expires, after
the holder saw SUSPENDED), so two holders never work at once. Back in CONNECTED, the same session
finds its node (still with its token) and works again; a new session contends afresh. A holder also
checks on every wake-up that the node is still its own.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from storage.api import BadVersion, MetadataStore, NodeExists, NoNode, SessionState, StorageError

log = logging.getLogger("gateway.storage.lease")


class Lease:
    def __init__(self, metadata: MetadataStore, path: str, *, retry_interval_s: float = 1.0) -> None:
        self._metadata = metadata
        self._path = path
        self._retry_interval_s = retry_interval_s
        self._token = uuid.uuid4().hex.encode()
        self._wake = asyncio.Event()
        self._connected = True
        self._interruptions = 0     # session events other than CONNECTED: a reply from before one is stale
        self._working: asyncio.Task | None = None
        self.held = False

    async def run(self, work: Callable[[], Awaitable[None]]) -> None:
        """Contend for the lease forever, running `work` while it is held. Cancel to stop (the node
        is left to its session: call release() to give it up at once)."""
        cancel_watch = self._metadata.watch(self._path, lambda _path: self._wake.set())
        cancel_events = self._metadata.on_session_event(self._on_session)
        try:
            while True:
                try:
                    await self._step(work)
                except StorageError as exc:
                    log.warning("lease %s: %s", self._path, exc)
                try:
                    async with asyncio.timeout(self._retry_interval_s):   # not wait_for, see zookeeper.py
                        await self._wake.wait()
                except TimeoutError:
                    pass
                self._wake.clear()
        finally:
            cancel_watch()
            cancel_events()
            working = self._working
            self._stop_working("stopped")
            if working is not None:
                await asyncio.gather(working, return_exceptions=True)   # its cleanup done before we return

    async def _step(self, work: Callable[[], Awaitable[None]]) -> None:
        if not self._connected:
            return
        interruptions = self._interruptions
        ours = await self._is_ours() if self.held else await self._acquire()
        if interruptions != self._interruptions:
            return   # the session was suspended or lost meanwhile: the answer may not hold; ask again
        if not ours:
            if self.held:
                self._stop_working("the lease node is no longer ours")
            return
        if not self.held:
            log.info("lease %s acquired", self._path)
            self.held = True
        if self._working is None or self._working.done():
            if self._working is not None and not self._working.cancelled() and self._working.exception():
                log.error("lease %s: work failed; restarting it", self._path, exc_info=self._working.exception())
            self._working = asyncio.create_task(work(), name=f"lease{self._path}")

    async def _acquire(self) -> bool:
        try:
            await self._metadata.create(self._path, self._token, ephemeral=True)
            return True
        except NodeExists:
            return await self._is_ours()   # our session's node, from before a connection loss

    async def _is_ours(self) -> bool:
        node = await self._metadata.get(self._path)
        return node is not None and node.value == self._token

    def _on_session(self, state: SessionState) -> None:
        self._connected = state is SessionState.CONNECTED
        if not self._connected:
            self._interruptions += 1
            self._stop_working(f"metadata session {state.value}")
        self._wake.set()

    def _stop_working(self, why: str) -> None:
        if self._working is not None:
            self._working.cancel()
            self._working = None
        if self.held:
            log.warning("lease %s given up: %s", self._path, why)
            self.held = False

    async def release(self) -> None:
        """Stop working and delete the node if it is ours, so a stand-by takes over at once."""
        self._stop_working("released")
        try:
            node = await self._metadata.get(self._path)
            if node is not None and node.value == self._token:
                await self._metadata.delete(self._path, node.version)
        except (NoNode, BadVersion, StorageError):
            pass   # gone already, or it goes with the session

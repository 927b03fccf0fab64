"""The metadata store as the owner of one bundle writes to it.

State that belongs to a bundle's owner (offset commits, queue cursors, group, transaction and
producer state, the delayed-message schedule) is written through this view. Each write carries the
guard of this broker's term on the bundle (BrokerCluster.guard), so it lands only while the term
lasts: a broker paused past its session gets Fenced instead of overwriting what the next owner
wrote. Reads and watches go straight to the store.
"""

from __future__ import annotations

from collections.abc import Callable

from storage.api import Guard, MetadataStore, SessionCallback, Versioned, WatchCallback


class GuardedMetadata:
    def __init__(self, metadata: MetadataStore, guard: Callable[[], Guard]) -> None:
        self._metadata = metadata
        self._guard = guard

    async def create(self, path: str, value: bytes, *, ephemeral: bool = False, guard: Guard | None = None) -> int:
        return await self._metadata.create(path, value, ephemeral=ephemeral, guard=guard or self._guard())

    async def put(self, path: str, value: bytes, expected_version: int | None = None, *,
                  guard: Guard | None = None) -> int:
        return await self._metadata.put(path, value, expected_version, guard=guard or self._guard())

    async def delete(self, path: str, expected_version: int | None = None, *, guard: Guard | None = None) -> None:
        await self._metadata.delete(path, expected_version, guard=guard or self._guard())

    async def get(self, path: str, *, latest: bool = False) -> Versioned | None:
        return await self._metadata.get(path, latest=latest)

    async def children(self, path: str) -> list[str]:
        return await self._metadata.children(path)

    async def next_id(self, counter: str) -> int:
        return await self._metadata.next_id(counter)

    def watch(self, path: str, callback: WatchCallback) -> Callable[[], None]:
        return self._metadata.watch(path, callback)

    def on_session_event(self, callback: SessionCallback) -> Callable[[], None]:
        return self._metadata.on_session_event(callback)

    @property
    def session_id(self) -> int | None:
        return self._metadata.session_id

    def session_alive_until(self) -> float:
        return self._metadata.session_alive_until()

    async def close(self) -> None:
        """The view owns nothing: the store is closed by whoever opened it."""

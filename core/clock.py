"""Time, injected: delayed messages, session timeouts and retention are tested without sleeping."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class FakeClock:
    """A clock that moves only when told to; sleepers wake when it passes their deadline."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms
        self._sleepers: list[tuple[int, asyncio.Future]] = []

    def now_ms(self) -> int:
        return self._now_ms

    async def sleep(self, seconds: float) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._now_ms + int(seconds * 1000), fut))
        await fut

    def advance(self, ms: int) -> None:
        self._now_ms += ms
        due = [s for s in self._sleepers if s[0] <= self._now_ms]
        self._sleepers = [s for s in self._sleepers if s[0] > self._now_ms]
        for _, fut in due:
            if not fut.done():
                fut.set_result(None)

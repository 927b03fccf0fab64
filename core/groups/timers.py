"""Wake-ups at deadlines, per key, from one task sleeping on the injected Clock.

`schedule(key, deadline)` asks for `on_due(key)` at or after the deadline; a key keeps only its
earliest request. Wake-ups may come early or for a key with nothing due any more (the owner asks
again with its real next deadline), which keeps scheduling O(log n) without ever cancelling.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from core.clock import Clock

log = logging.getLogger("gateway.core")

K = TypeVar("K", bound=Hashable)


class Deadlines(Generic[K]):
    def __init__(self, clock: Clock, on_due: Callable[[K], None]) -> None:
        self._clock = clock
        self._on_due = on_due
        self._heap: list[tuple[int, int, K]] = []
        self._earliest: dict[K, int] = {}     # key -> its earliest queued deadline
        self._order = itertools.count()
        self._timer: asyncio.Task | None = None
        self._armed_for: int | None = None

    def schedule(self, key: K, deadline_ms: int | None) -> None:
        if deadline_ms is None:
            return
        queued = self._earliest.get(key)
        if queued is not None and queued <= deadline_ms:
            return
        self._earliest[key] = deadline_ms
        heapq.heappush(self._heap, (deadline_ms, next(self._order), key))
        self._arm()

    def fire_due(self) -> None:
        """Call `on_due` for every key whose deadline has passed."""
        now = self._clock.now_ms()
        while self._heap and self._heap[0][0] <= now:
            deadline, _, key = heapq.heappop(self._heap)
            if self._earliest.get(key) != deadline:
                continue   # superseded by an earlier request that already fired
            del self._earliest[key]
            try:
                self._on_due(key)
            except Exception:
                log.exception("timeout handling for %s failed", key)
        self._arm()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._heap.clear()
        self._earliest.clear()

    def _arm(self) -> None:
        if not self._heap:
            return
        first = self._heap[0][0]
        if self._timer is not None and self._armed_for is not None and self._armed_for <= first:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._armed_for = first
        self._timer = asyncio.get_running_loop().create_task(self._sleep_until(first), name="group-timeouts")

    async def _sleep_until(self, deadline_ms: int) -> None:
        delay_ms = deadline_ms - self._clock.now_ms()
        if delay_ms > 0:      # (a FakeClock wakes sleepers only when it moves: never sleep for 0)
            await self._clock.sleep(delay_ms / 1000)
        self._timer = None
        self._armed_for = None
        self.fire_due()

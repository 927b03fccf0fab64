"""Persisting a subscription's cursor in the background, and the delivery reservation it stores.

Acknowledgements and hand-outs change the cursor in memory (core/queues/deliveries.py); this
writes it, one write at a time and at most one per `interval_s` however many changes arrive
meanwhile (`changed` does not wait; `save_position` waits for the write that covers it). Each
write is a metadata store commit, fsync included: a crash may hand out again what was acknowledged
in the last interval, never lose it. After a write, where the topic deletes what every
subscription consumed, the core is asked to (at most every TRIM_INTERVAL_MS); acks alone never
delete records.

A message is handed out only below the cursor's stored delivery reservation, asked for
`reservation` offsets ahead (core/cursor.py), so a crash or a failover between a hand-out and the
next write cannot make the next owner hand it out again unmarked. The reservation is asked for
again once half of it is used, so a consumer below ~100k messages/s never waits for one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from core.clock import Clock
from core.cursor import Cursor
from core.errors import CoreError

log = logging.getLogger("gateway.core")

TRIM_INTERVAL_MS = 10_000        # ask the core to drop consumed ledgers at most this often
RETRY_S = 1.0                    # after a failed write


class CursorWriter:
    def __init__(self, cursor: Cursor, clock: Clock, *, name: str, interval_s: float, reservation: int,
                 on_reserved: Callable[[], None],
                 delete_consumed: Callable[[], Awaitable[None]] | None = None, retry_s: float = RETRY_S) -> None:
        self.cursor = cursor
        self._clock = clock
        self._name = name
        self._interval_s = interval_s
        self.reservation = reservation
        self._on_reserved = on_reserved     # a reservation asked for was stored
        self._delete_consumed = delete_consumed
        self._retry_s = retry_s
        self.closed = False
        self._dirty = False
        self._flusher: asyncio.Task | None = None
        self._waiters: list[asyncio.Future] = []
        self._flushed_at = 0.0                       # loop time of the last write
        self._hurry: asyncio.Future | None = None    # cuts the pause before the next write short
        self.reserving: asyncio.Future | None = None  # done once the reservation asked for is stored
        self._last_trim_ms = 0
        self._trim_later: asyncio.Task | None = None

    # --- writing --------------------------------------------------------------------------------

    def changed(self) -> None:
        """The cursor changed in memory: write it soon."""
        self._dirty = True
        if self._flusher is None and not self.closed:
            self._flusher = asyncio.create_task(self._flush(), name=f"queue-cursor {self._name}")

    def hurry(self) -> None:
        if self._hurry is not None:
            resolve([self._hurry])

    async def save_position(self) -> None:
        """Wait until the cursor, as it is now, is persisted (by the background write, at once)."""
        if self.closed:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self.changed()
        self.hurry()
        await waiter

    async def _flush(self) -> None:
        try:
            while self._dirty:
                await self._pause_between_flushes()
                self._dirty = False
                waiters, self._waiters = self._waiters, []
                try:
                    await self.cursor.flush()
                    resolve(waiters)
                    await self._trim()
                except Exception as exc:
                    log.warning("saving the position of queue %s failed: %s", self._name,
                                exc if isinstance(exc, CoreError) else repr(exc))
                    self._waiters[:0] = [w for w in waiters if not w.done()]
                    self._dirty = True
                    if self.closed:
                        # close() tries once more and says how it went: a write refused for good
                        # (Fenced: this broker's term on the queue ended) must not hold the close.
                        return
                    await asyncio.sleep(self._retry_s)
        finally:
            self._flusher = None

    async def _pause_between_flushes(self) -> None:
        loop = asyncio.get_running_loop()
        wait_s = self._flushed_at + self._interval_s - loop.time()
        if wait_s > 0 and not self._waiters and not self.closed:
            hurry = self._hurry = loop.create_future()
            timer = loop.call_later(wait_s, resolve, [hurry])
            try:
                await hurry
            finally:
                timer.cancel()
                self._hurry = None
        self._flushed_at = loop.time()

    # --- the delivery reservation ---------------------------------------------------------------

    def asks_from(self) -> int:
        """Offsets from here on need `reserved_for` before they go out."""
        return self.cursor.delivery_reserved - self.reservation // 2

    def reserve_ahead_of(self, offset: int) -> None:
        if not self.closed:
            self.cursor.reserve_deliveries(offset + self.reservation)
            self.changed()

    def reserved_for(self, offset: int) -> bool:
        """Whether `offset` may be handed out now; asks for a reservation further ahead once half of
        the stored one is used, and starts waiting for one beyond it (`reserving`)."""
        if offset < self.asks_from():
            return True
        if self.closed:
            return False
        self.reserve_ahead_of(offset)
        if offset < self.cursor.delivery_reserved:
            return True
        if self.reserving is None:
            waiter = self.reserving = asyncio.get_running_loop().create_future()
            waiter.add_done_callback(self._reservation_stored)
            self._waiters.append(waiter)
            self.hurry()
        return False

    def _reservation_stored(self, _waiter: asyncio.Future) -> None:
        self.reserving = None
        self._on_reserved()

    # --- trimming -------------------------------------------------------------------------------

    async def _trim(self) -> None:
        """The position moved: where the topic deletes what every subscription consumed, let the
        core do it (at most every TRIM_INTERVAL_MS, later if asked sooner)."""
        if self._delete_consumed is None or self._trim_later is not None:
            return
        wait_ms = self._last_trim_ms + TRIM_INTERVAL_MS - self._clock.now_ms()
        if wait_ms > 0:
            self._trim_later = asyncio.create_task(self._trim_after(wait_ms), name=f"queue-trim {self._name}")
            return
        self._last_trim_ms = self._clock.now_ms()
        await self._delete_consumed()

    async def _trim_after(self, wait_ms: int) -> None:
        try:
            await self._clock.sleep(wait_ms / 1000)
            self._last_trim_ms = self._clock.now_ms()
            await self._delete_consumed()
        except Exception as exc:
            log.warning("deleting what queue %s consumed failed: %s", self._name, exc)
        finally:
            self._trim_later = None

    # --- stopping -------------------------------------------------------------------------------

    async def close(self) -> None:
        """Write the cursor a last time, with its reservation ended (nothing more goes out here)."""
        self.closed = True
        if self._trim_later is not None:
            self._trim_later.cancel()
            self._trim_later = None
        self.cursor.end_reservation()
        self.changed()
        self.hurry()
        flusher = self._flusher
        if flusher is not None:
            try:
                await flusher
            except Exception:
                pass
        if self._dirty:
            self._dirty = False
            await self.cursor.flush()
        resolve(self._waiters)
        self._waiters = []

    def discard(self) -> None:
        """Stop without writing anything."""
        self.closed = True
        for task in (self._flusher, self._trim_later):
            if task is not None:
                task.cancel()
        self._flusher = self._trim_later = None
        resolve(self._waiters)
        self._waiters = []


def resolve(waiters: list[asyncio.Future]) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)

"""Message expiry (x-message-ttl and per-message TTL) and unused-queue expiry (x-expires).

A message's deadline is the earlier of its arrival time plus the queue's TTL and its own
`queue.expires-at` header (core/queues/message.py: `deadline`). As in RabbitMQ's classic queues,
only a message at the head of the queue (the next one to hand out) is checked and removed; an
expired message is never delivered. A message is expired from its deadline on, except when it can
be handed out the moment it arrives (so TTL 0 means "deliver at once or never").

`ExpirySweeper` removes expired heads while nobody consumes (or every consumer is full), so they
are dead-lettered on time and stop being counted; it sleeps until the head's deadline, at most
SWEEP_S. `UnusedQueueTimer` deletes a queue that went unused (no consumer, no basic.get, no
redeclare) for its x-expires.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from core.clock import Clock

log = logging.getLogger("gateway.core")

SWEEP_S = 1.0
MIN_SLEEP_S = 0.001


async def _sleep_or_wake(clock: Clock, seconds: float, wake: asyncio.Event) -> None:
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    waker = asyncio.ensure_future(wake.wait())
    try:
        await asyncio.wait((sleeper, waker), return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
        waker.cancel()


class Expiring(Protocol):
    async def drop_expired(self) -> int | None:
        """Drop the expired head messages; the deadline of the head that stays."""


class Queue(Protocol):
    """What the unused-queue timer reads of its queue (core/queues/queue.py)."""
    name: str
    deleted: bool
    consumer_count: int
    served_here: bool


class ExpirySweeper:
    """Drops expired head messages of one subscription in the background."""

    def __init__(self, subscription: Expiring, clock: Clock, name: str) -> None:
        self._subscription = subscription
        self._clock = clock
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"queue-expiry {name}")
        self._name = name

    def wake(self) -> None:
        """New messages arrived: the head may have changed."""
        self._wake.set()

    async def _run(self) -> None:
        subscription = self._subscription
        while True:
            self._wake.clear()
            try:
                head_deadline = await subscription.drop_expired()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("expiring messages of queue %s failed: %s", self._name, exc)
                head_deadline = None
            wait = SWEEP_S
            if head_deadline is not None:
                wait = min(SWEEP_S, max(MIN_SLEEP_S, (head_deadline - self._clock.now_ms()) / 1000))
            await _sleep_or_wake(self._clock, wait, self._wake)

    def close(self) -> None:
        self._task.cancel()


class UnusedQueueTimer:
    """Deletes `queue` (through `delete`) once it has been unused for `expires_ms`."""

    def __init__(self, queue: Queue, expires_ms: int, clock: Clock,
                 delete: Callable[[Queue], Awaitable[None]]) -> None:
        self._queue = queue
        self._expires_ms = expires_ms
        self._clock = clock
        self._delete = delete
        self._wake = asyncio.Event()
        self.last_used_ms = clock.now_ms()
        self._task = asyncio.create_task(self._run(), name=f"queue-expires {queue.name}")

    def touch(self) -> None:
        """Used now (basic.get, a redeclare, a consumer leaving): the countdown starts again."""
        self.last_used_ms = self._clock.now_ms()
        self._wake.set()

    async def _run(self) -> None:
        queue = self._queue
        while not queue.deleted:
            self._wake.clear()
            if queue.consumer_count or not queue.served_here:
                # In use (the countdown starts when the last one leaves), or served by another
                # broker of the cluster, which counts its uses.
                self.last_used_ms = self._clock.now_ms()
                await _sleep_or_wake(self._clock, SWEEP_S, self._wake)
                continue
            left_ms = self.last_used_ms + self._expires_ms - self._clock.now_ms()
            if left_ms > 0:
                await _sleep_or_wake(self._clock, left_ms / 1000, self._wake)
                continue
            try:
                await self._delete(queue)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("deleting expired queue %s failed: %s", queue.name, exc)
                await _sleep_or_wake(self._clock, SWEEP_S, self._wake)

    def close(self) -> None:
        if self._task is not asyncio.current_task():    # not from inside its own deletion
            self._task.cancel()

"""What a front end sees of a queue's subscription, and what it hands the subscription.

An AMQP channel, a Kafka share group's queue side and the coming Pulsar subscriptions consume
through `Subscription`; they give it `Consumer`s. In a cluster the owner's lease comes in as a
`Lease`. Both the local subscription (core/queues/subscription.py) and its stand-in on another
broker (core/queues/remote_subscription.py) offer this surface.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Protocol

from core.queues.message import QueuedMessage


class Lease(Protocol):
    def held(self) -> bool:
        """Whether this process surely still owns the queue."""

    def when_held(self, callback: Callable[[], None]) -> bool:
        """Call `callback()` once it may own it again; False if it never will (the queue closes)."""


class Consumer(Protocol):
    prefetch: int                # unacknowledged deliveries it may hold; 0: no limit
    auto_ack: bool               # deliveries count as acknowledged at once
    # Optionally `priority: int` (default 0): consumers of a higher priority are served first; and
    # `flush()`: called after a dispatch that handed it messages, so a consumer that buffers its
    # output sends them at once rather than after whatever else the event loop has queued.

    def can_deliver(self) -> bool:
        """Room beyond prefetch: False while paused or while its output is backed up."""

    def deliver(self, message: QueuedMessage) -> None:
        """Hand the message over (buffer it for the client); must not call back into the queue."""

    def queue_deleted(self) -> None:
        """The queue was deleted under the consumer: nothing more will come (AMQP sends basic.cancel)."""


class Subscription(Protocol):
    """Consuming a queue: consumers come and go, messages are acknowledged, given back or taken one by one."""

    @property
    def consumers(self) -> list[Consumer]: ...

    def check_consumer(self, *, exclusive: bool = False) -> None:
        """Raise what adding a consumer would raise (ExclusiveUse), without adding it."""

    def remove_consumer(self, consumer: Consumer, *, holder: Hashable | None = None) -> None:
        """The consumer is gone; what it holds goes back, or stays with `holder` until settled."""

    def release(self, owner: Hashable) -> None:
        """Give back every message `owner` holds unacknowledged."""

    def ack(self, offsets: list[int]) -> None: ...

    def reject(self, offsets: list[int], *, requeue: bool) -> None: ...

    async def get(self, owner: Hashable, *, auto_ack: bool) -> QueuedMessage | None: ...

    async def save_position(self) -> None:
        """Wait until the acknowledgements so far are stored."""

"""The delivery acknowledgement timeout: how long a consumer may keep a delivery unacknowledged
(RabbitMQ's `consumer_timeout` setting and `x-consumer-timeout` queue argument), checked cheaply.

Nothing is timed per message. A holder of deliveries (an AMQP channel) stamps each one with
`DeliveryClock.stamp`, the time of the clock's latest tick (an attribute read, not a clock read),
and on every tick looks at its oldest unsettled delivery only, as RabbitMQ does: `overdue(stamp,
timeout_ms)`. A stamp may be up to one tick early, so a delivery is overdue once it has been held
longer than the timeout for certain: never early (a tick the event loop runs late makes it early by
at most that lateness), at most about two ticks late.

The timeout that applies is the queue's (x-consumer-timeout, ms, 0 included: overdue at the first
tick) or else the broker's default; None is no timeout.
"""

from __future__ import annotations

from core.clock import Clock

DEFAULT_TIMEOUT_MS = 1_800_000      # RabbitMQ's consumer_timeout default: 30 minutes


def timeout_for(queue_timeout_ms: int | None, default_ms: int | None) -> int | None:
    """The timeout of a delivery from a queue: the queue's own, else the broker's default."""
    return queue_timeout_ms if queue_timeout_ms is not None else default_ms


class DeliveryClock:
    """The coarse time deliveries are stamped with, moved on by `tick()` every `tick_ms`."""

    __slots__ = ("_clock", "stamp", "tick_ms")

    def __init__(self, clock: Clock, tick_ms: int) -> None:
        self._clock = clock
        self.tick_ms = tick_ms          # the longest time between ticks: how early a stamp can be
        self.stamp = clock.now_ms()

    def tick(self) -> None:
        self.stamp = self._clock.now_ms()

    def overdue(self, stamp: int, timeout_ms: int | None) -> bool:
        """The delivery stamped `stamp` has certainly been held longer than `timeout_ms`."""
        return timeout_ms is not None and self._clock.now_ms() - stamp - self.tick_ms > timeout_ms

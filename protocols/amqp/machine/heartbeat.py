"""Heartbeat bookkeeping as pure functions of a clock value the caller passes in.

As RabbitMQ does: send a heartbeat when nothing was sent for half the interval (so a busy
connection needs none), and consider the peer dead after two whole intervals without a byte
from it (any data counts, not only heartbeat frames). An interval of 0 turns both off.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class HeartbeatClock:
    interval: float = 0.0               # seconds, as negotiated; 0: heartbeats off
    last_sent: float | None = None      # None: nothing sent yet
    last_received: float | None = None  # None: nothing received yet

    def mark_sent(self, now: float) -> None:
        self.last_sent = now

    def mark_received(self, now: float) -> None:
        self.last_received = now

    def needs_heartbeat(self, now: float) -> bool:
        if not self.interval:
            return False
        return self.last_sent is None or now - self.last_sent >= self.interval / 2

    def peer_is_dead(self, now: float) -> bool:
        if not self.interval or self.last_received is None:
            return False
        return now - self.last_received >= 2 * self.interval

"""A message of a queue as its consumers see it: a stored record plus how often it went out."""

from __future__ import annotations

from dataclasses import dataclass

UNCHECKED = -1                   # QueuedMessage.expires_at not computed yet


@dataclass(slots=True, eq=False)
class QueuedMessage:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    deliveries: int = 0          # how often it was handed out before
    expires_at: int | None = UNCHECKED   # wall-clock ms deadline (core/queues/expiry.py), None: never

    @property
    def redelivered(self) -> bool:
        return self.deliveries > 0

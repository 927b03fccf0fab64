"""A message of a queue as its consumers see it: a stored record plus how often it went out, and
when it expires (core/queues/expiry.py)."""

from __future__ import annotations

from dataclasses import dataclass

from core.queues import attributes

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


def deadline(timestamp_ms: int, headers: tuple[tuple[str, bytes | None], ...], ttl_ms: int | None) -> int | None:
    """When a message expires (wall-clock ms), or None if never."""
    found = ttl_ms if ttl_ms is None else timestamp_ms + ttl_ms
    for name, value in headers:
        if name == attributes.EXPIRES_AT and value:
            try:
                own = int(value)
            except ValueError:
                break
            found = own if found is None else min(found, own)
            break
    return found

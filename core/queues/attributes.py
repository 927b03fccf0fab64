"""Record headers through which a protocol tells the core how to treat one message in a queue.

The core never parses a protocol's own message properties (AMQP's content header stays raw); a
protocol that publishes a message copies what the core acts on into these protocol-free headers,
and strips them again when it delivers. Values are ASCII text.

    queue.expires-at    the wall-clock ms after which the message is dead (per-message TTL)
    queue.priority      0..255, higher first on queues with a maximum priority
    queue.transient     "1": need not outlive a restart of the gateway
    queue.delay-until   the wall-clock ms before which the message must not be routed
    queue.death         the message's dead-letter history (JSON; layout in core/queues/dead_letter.py)
    queue.group         the message group (bytes as published): one consumer at a time, in order,
                        on a key-shared queue (core/queues/groups.py)

The exchange a message was published through is `amqp.exchange` (EXCHANGE): exchanges are the
core's, the header keeps the name under which AMQP publishes first stored it.

A record without them (one a Kafka producer wrote) is persistent, never expires, priority 0.
"""

from __future__ import annotations

from collections.abc import Iterable

PREFIX = "queue."
EXPIRES_AT = "queue.expires-at"
PRIORITY = "queue.priority"
TRANSIENT = "queue.transient"
DELAY_UNTIL = "queue.delay-until"
DEATH = "queue.death"
GROUP = "queue.group"
EXCHANGE = "amqp.exchange"


def header_int(headers: Iterable[tuple[str, bytes | None]], name: str) -> int | None:
    """The integer value of header `name`, or None when absent or not a number."""
    for key, value in headers:
        if key == name and value is not None:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def has_header(headers: Iterable[tuple[str, bytes | None]], name: str) -> bool:
    return any(key == name for key, _ in headers)


def without_core_headers(headers: Iterable[tuple[str, bytes | None]]) -> tuple[tuple[str, bytes | None], ...]:
    """The headers a consumer should see: the core's own removed."""
    return tuple((key, value) for key, value in headers if not key.startswith(PREFIX))

"""Dead-lettering: a message that dies in a queue (expired, rejected, over a length or delivery limit)
is republished through the queue's dead-letter exchange, with its death history.

The history lives in the record header `queue.death` (core/queues/attributes.py) as JSON:

    {"first": {"queue": str, "reason": str, "exchange": str},
     "deaths": [{"queue": str, "reason": str, "count": int, "exchange": str, "routing-keys": [str],
                 "time": ms, "original-expiration": str (only if it had a per-message TTL)}, ...]}

`deaths` is newest first; dying again in the same queue for the same reason increments that entry's
count and moves it to the front (its other fields stay), as RabbitMQ's x-death does. The copy is
routed with the dead-letter routing key, or its own routing key, through the dead-letter exchange,
and loses its per-message expiry. A copy that would go back to a queue it already died in, with no
rejection since, is a cycle and is not delivered there (RabbitMQ drops it the same way).

Nothing is lost: `DeadLetterer.send` appends the copies to every target durably first; only then is
the original acknowledged in its queue (at-least-once across a crash). A failed append is retried.
A target another broker of the cluster owns gets its copies through that broker, over the peer link
as a client's publishes (core/queues/forwarding.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from core.errors import CoreError
from core.clock import Clock
from core.queues import attributes
from core.queues.message import QueuedMessage
from core.queues.policy import QueuePolicy
from core.records.builder import Record

if TYPE_CHECKING:
    from core.cluster.bundles import Bundle

log = logging.getLogger("gateway.core")

EXPIRED, REJECTED, MAXLEN, DELIVERY_LIMIT = "expired", "rejected", "maxlen", "delivery_limit"
RETRY_S = 1.0

Headers = tuple[tuple[str, bytes | None], ...]

# Readers of the message headers a headers exchange matches on, by the record header a protocol keeps
# its message properties in (a protocol registers its own; the core never parses them).
HEADER_READERS: dict[str, Callable[[bytes], Mapping[str, Any]]] = {}


def history(headers: Iterable[tuple[str, bytes | None]]) -> dict[str, Any] | None:
    """The death history in `headers`, or None. Anyone may write this header into a topic (a Kafka
    producer), so what does not have the layout above is left out rather than trusted."""
    for name, value in headers:
        if name == attributes.DEATH and value:
            try:
                doc = json.loads(value)
            except ValueError:
                return None
            if not isinstance(doc, dict) or not isinstance(doc.get("deaths"), list):
                return None
            deaths = [entry for entry in map(_clean_entry, doc["deaths"]) if entry is not None]
            first = doc.get("first")
            if not deaths or not isinstance(first, dict):
                return None
            return {"first": {key: str(first.get(key, "")) for key in ("queue", "reason", "exchange")},
                    "deaths": deaths}
    return None


def _clean_entry(entry: Any) -> dict[str, Any] | None:
    if not isinstance(entry, dict):
        return None
    try:
        clean = {"queue": str(entry["queue"]), "reason": str(entry["reason"]), "count": max(1, int(entry["count"])),
                 "exchange": str(entry.get("exchange", "")),
                 "routing-keys": [str(key) for key in entry.get("routing-keys", [])],
                 "time": int(entry.get("time", 0))}
    except (KeyError, TypeError, ValueError):
        return None
    if "original-expiration" in entry:
        clean["original-expiration"] = str(entry["original-expiration"])
    return clean


def with_death(past: dict[str, Any] | None, *, queue: str, reason: str, exchange: str, routing_keys: list[str],
               time_ms: int, original_expiration: str | None) -> dict[str, Any]:
    """The history after one more death."""
    deaths = list(past["deaths"]) if past else []
    for index, entry in enumerate(deaths):
        if entry.get("queue") == queue and entry.get("reason") == reason:
            entry = dict(entry, count=int(entry.get("count", 1)) + 1)
            del deaths[index]
            break
    else:
        entry = {"queue": queue, "reason": reason, "count": 1, "exchange": exchange, "routing-keys": routing_keys,
                 "time": time_ms}
        if original_expiration is not None:
            entry["original-expiration"] = original_expiration
    first = past["first"] if past and isinstance(past.get("first"), dict) else \
        {"queue": queue, "reason": reason, "exchange": exchange}
    return {"first": first, "deaths": [entry] + deaths}


def is_cycle(target_queue: str, deaths: list[dict[str, Any]]) -> bool:
    """True if the message already died in `target_queue` and was not rejected anywhere since."""
    for entry in deaths:
        if entry.get("queue") == target_queue:
            return entry.get("reason") != REJECTED
        if entry.get("reason") == REJECTED:
            return False
    return False


def dead_copy(timestamp_ms: int, key: bytes | None, value: bytes | None, headers: Headers, *, queue: str,
              reason: str, exchange: str, routing_key: str | None, now_ms: int) -> tuple[Record, dict[str, Any]]:
    """The record to republish through `exchange`, and its new history."""
    old_exchange, expires_at, kept = "", None, []
    for name, header_value in headers:
        if name == attributes.EXCHANGE:
            old_exchange = (header_value or b"").decode("utf-8", "replace")
        elif name == attributes.EXPIRES_AT:
            expires_at = header_value
        elif not name.startswith(attributes.PREFIX):
            kept.append((name, header_value))
    original_expiration = None
    if expires_at is not None:
        try:
            original_expiration = str(max(0, int(expires_at) - timestamp_ms))
        except ValueError:
            pass
    routing_keys = [(key or b"").decode("utf-8", "replace")]
    doc = with_death(history(headers), queue=queue, reason=reason, exchange=old_exchange,
                     routing_keys=routing_keys, time_ms=now_ms, original_expiration=original_expiration)
    new_key = key if routing_key is None else routing_key.encode()
    new_headers = ((attributes.EXCHANGE, exchange.encode()), *kept,
                   (attributes.DEATH, json.dumps(doc, separators=(",", ":")).encode()))
    return Record(now_ms, key=new_key, value=value, headers=new_headers), doc


def _routing_headers(headers: Headers) -> Mapping[str, Any]:
    for name, value in headers:
        reader = HEADER_READERS.get(name)
        if reader is not None and value is not None:
            try:
                return reader(value)
            except Exception:
                return {}
    return {}


class Queue(Protocol):
    """What the dead-letter side reads of its queue (core/queues/queue.py) and of a target queue."""
    name: str
    deleted: bool
    policy: QueuePolicy
    clock: Clock
    bundle: "Bundle"


class DeadLetterer:
    """The dead-letter side of one queue. `await route(exchange, routing_key, headers)` is its namespace's."""

    def __init__(self, queue: "Queue", route: Callable[..., Awaitable[list["Queue"]]],
                 deliver: Callable[["Queue", list[Record], "Bundle"], list[Awaitable]]) -> None:
        """`deliver(target, records, sender)`: appends to a queue here or on the broker owning it."""
        self._queue = queue
        self._route = route
        self._deliver = deliver
        self._tasks: set[asyncio.Task] = set()

    def send(self, messages: list["QueuedMessage"], reason: str, settled: Callable[[list[int]], None]) -> None:
        """Republish `messages` (taken out of the queue, not acknowledged); `settled(offsets)` once
        every copy is durable, or at once when there is nowhere to send them."""
        task = asyncio.create_task(self._send(messages, reason, settled), name=f"dead-letter {self._queue.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def send_record(self, record: Record, reason: str) -> None:
        """Dead-letter a publish the queue refused (reject-publish-dlx): nothing to acknowledge."""
        message = QueuedMessage(-1, record.timestamp_ms, record.key, record.value, tuple(record.headers))
        self.send([message], reason, lambda _offsets: None)

    async def _send(self, messages: list["QueuedMessage"], reason: str, settled: Callable[[list[int]], None]) -> None:
        queue = self._queue
        while not queue.deleted:
            try:
                await self._publish_all(messages, reason)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("dead-lettering from queue %s failed, retrying: %s", queue.name, exc)
                await asyncio.sleep(RETRY_S)
                continue
            settled([message.offset for message in messages if message.offset >= 0])
            return

    async def _publish_all(self, messages: list["QueuedMessage"], reason: str) -> None:
        queue = self._queue
        policy = queue.policy
        exchange = policy.dead_letter_exchange
        if exchange is None:
            return
        now = queue.clock.now_ms()
        copies: dict[str, tuple["Queue", list[Record]]] = {}    # by target: one request each if it is elsewhere
        for message in messages:
            record, doc = dead_copy(message.timestamp_ms, message.key, message.value, message.headers,
                                    queue=queue.name, reason=reason, exchange=exchange,
                                    routing_key=policy.dead_letter_routing_key, now_ms=now)
            headers = record.headers
            try:
                targets = await self._route(exchange, record.key.decode("utf-8", "replace") if record.key else "",
                                            lambda: _routing_headers(headers))
            except CoreError:
                targets = []      # no such exchange (any more): dropped, as RabbitMQ does
            for target in targets:
                if is_cycle(target.name, doc["deaths"]):
                    log.warning("message dead-lettered from queue %s to %s dropped: a dead-letter cycle",
                                queue.name, target.name)
                    continue
                copies.setdefault(target.name, (target, []))[1].append(record)
        durable = [waiter for target, records in copies.values()
                   for waiter in self._deliver(target, records, queue.bundle)]
        if durable:
            results = await asyncio.gather(*durable, return_exceptions=True)
            for result in results:
                if isinstance(result, BaseException) and not getattr(result, "refused", False):
                    raise result

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()

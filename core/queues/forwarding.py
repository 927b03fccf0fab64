"""Messages for a queue another broker of the cluster serves.

Published by a client of this broker: they go over the peer link to the owner
(core/cluster/peers.py), in order, one request in flight per queue (`RemotePublisher`); the owner
appends them as a publish of its own (length limits, consumers) and answers once they are durable
there, each message with its own outcome (a full reject-publish queue refuses some). A declare or a
message count of such a queue is asked of the owner the same way.

Dead-lettered into it, or released into it by the delayed store: the same way, and only once they
are durable there does the sender count them as delivered (it sends again after a failure, so a
link lost with the request in flight may store them twice: dead-lettering is at least once anyway,
and a delayed release finds what arrived by its delayed.id). A cluster without peer links sends
them through the owner's mailbox (core/cluster/mailbox.py) instead: a request carries up to
MAX_REQUEST_BYTES of records (base64 in JSON, under the metadata store's value limit), is named after
its content so that asking again finds the first one, and a single larger record cannot go.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from core.cluster.bundles import Bundle
from core.cluster.owners import ask_owner_waiting, owner_of, retrieved
from core.cluster.peer_records import pack
from core.errors import CoreError, StorageUnavailable
from core.queues import arguments as stored_arguments
from core.queues.limits import PublishRefused
from core.records.builder import Record

log = logging.getLogger("gateway.core.queues")

PUBLISH = "queue-publish"
DECLARE = "queue-declare"
COUNTS = "queue-counts"
DELETE = "queue-delete"
MAX_REQUEST_BYTES = 512 << 10
MAX_PEER_BATCH = 4096             # messages of one publish request over a peer link ...
MAX_PEER_REQUEST_BYTES = 4 << 20  # ... and their bytes (a single larger message goes alone)
MAX_PEER_WAITING = 4 * MAX_PEER_BATCH   # messages waiting for the link before publishers wait


def base64_text(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def base64_bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def encode_records(records: list[Record]) -> list[list]:
    return [[r.timestamp_ms, base64_text(r.key), base64_text(r.value), [[name, base64_text(value)] for name, value in r.headers]]
            for r in records]


def decode_records(rows: list[list]) -> list[Record]:
    return [Record(timestamp, base64_bytes(key), base64_bytes(value), tuple((name, base64_bytes(v)) for name, v in headers))
            for timestamp, key, value, headers in rows]


def _requests(queue: str, records: list[Record]) -> Iterator[tuple[str, dict]]:
    """(name, request) for `records`, split so that each request stays under MAX_REQUEST_BYTES."""
    rows: list[list] = []
    size = 0
    for row in encode_records(records):
        row_size = len(json.dumps(row))
        if rows and size + row_size > MAX_REQUEST_BYTES:
            yield _request(queue, rows)
            rows, size = [], 0
        rows.append(row)
        size += row_size
    if rows:
        yield _request(queue, rows)


def _request(queue: str, rows: list[list]) -> tuple[str, dict]:
    body = {"kind": PUBLISH, "queue": queue, "records": rows}
    digest = hashlib.sha256(json.dumps(body, separators=(",", ":")).encode()).hexdigest()[:40]
    return f"publish.{digest}", body


async def forward(core, queue: str, to: Bundle, records: list[Record], sender: Bundle) -> None:
    """Append `records` to `queue`, owned by the owner of `to`; this broker writes as the owner of
    `sender` (the queue or delayed store the messages come from). Durable there when it returns."""
    for name, request in _requests(queue, records):
        await core.mailbox.ask(to, name, request, core.owner_metadata(sender))


# --- over the peer links -----------------------------------------------------------------------


def request_head(kind: str, bundle: Bundle, queue: str, **fields: Any) -> dict:
    return {"kind": kind, "tenant": bundle.tenant, "namespace": bundle.namespace, "queue": queue, **fields}


class RemotePublisher:
    """Publishes into a queue another broker serves. One request is in flight at a time, and what is
    published meanwhile goes in the next one: the owner appends in publish order. Each future is
    done once its message is durable there (or failed: a broken link leaves it unknown, as a lost
    connection does for a RabbitMQ publisher)."""

    def __init__(self, core, queue) -> None:
        self._core = core
        self._queue = queue
        self._waiting: list[tuple[Record, asyncio.Future]] = []
        self._sending: asyncio.Task | None = None
        self._writable = asyncio.Event()
        self._writable.set()

    @property
    def writable(self) -> bool:
        """False while MAX_PEER_WAITING messages wait: a connection publishing here stops reading."""
        return self._writable.is_set()

    async def wait_writable(self) -> None:
        await self._writable.wait()

    def publish(self, record: Record) -> asyncio.Future:
        return self._enqueue(record)

    def publish_batch(self, records: list[Record]) -> asyncio.Future:
        """`records` stored at the owner all together or not at all (one request of their own)."""
        return self._enqueue(list(records))

    def _enqueue(self, item: Record | list[Record]) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        future.add_done_callback(retrieved)      # a publish without confirms need not look at it
        self._waiting.append((item, future))
        if len(self._waiting) >= MAX_PEER_WAITING:
            self._writable.clear()
        if self._sending is None:
            self._sending = asyncio.ensure_future(self._send())
        return future

    def _next_request(self) -> tuple[list, bool]:
        """The waiting publishes of the next request, and whether it is one atomic batch."""
        waiting = self._waiting
        if isinstance(waiting[0][0], list):
            taken, atomic = 1, True
        else:
            taken, size, atomic = 0, 0, False
            while taken < len(waiting) and taken < MAX_PEER_BATCH and size < MAX_PEER_REQUEST_BYTES \
                    and not isinstance(waiting[taken][0], list):
                record = waiting[taken][0]
                size += len(record.value or b"") + len(record.key or b"")
                taken += 1
        batch, self._waiting = waiting[:taken], waiting[taken:]
        if len(self._waiting) < MAX_PEER_WAITING:
            self._writable.set()
        return batch, atomic

    async def _send(self) -> None:
        try:
            while self._waiting:
                batch, atomic = self._next_request()
                records = batch[0][0] if atomic else [record for record, _ in batch]
                try:
                    answer = await self._ask(pack(records), atomic)
                except Exception as exc:
                    if not isinstance(exc, CoreError):   # a bug: the publishes still get an answer (a nack)
                        log.exception("publishing to queue %s at its owner failed", self._queue.name)
                        exc = StorageUnavailable(f"publishing to the queue's owner failed: {exc!r}")
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                refused = dict(answer.get("refused", {}))
                for index, (_, future) in enumerate(batch):
                    if future.done():
                        continue
                    if str(index) in refused:
                        future.set_exception(PublishRefused(refused[str(index)]))
                    else:
                        future.set_result(None)
        finally:
            self._sending = None

    async def _ask(self, payload: bytes, atomic: bool) -> dict:
        queue = self._queue
        answer, _ = await ask_owner_waiting(self._core, lambda: queue.bundle,
                                            request_head(PUBLISH, queue.bundle, queue.name, atomic=atomic), payload)
        return answer


async def declare_remote(core, bundle: Bundle, name: str, *, durable: bool, auto_delete: bool, exclusive: bool,
                         arguments: Mapping[str, Any], declared_by: str) -> dict:
    """Declare queue `name` (of `bundle`, served by another broker) at its owner: returns the stored
    QueueInfo document."""
    answer, _ = await core.peers.ask(owner_of(core, bundle), request_head(
        DECLARE, bundle, name, durable=durable, auto_delete=auto_delete, exclusive=exclusive,
        arguments=stored_arguments.to_json(arguments), declared_by=declared_by))
    return answer["info"]


async def remote_counts(core, queue) -> tuple[int, int]:
    """(ready messages, consumers) of `queue` as its owner counts them."""
    answer, _ = await core.peers.ask(owner_of(core, queue.bundle), request_head(COUNTS, queue.bundle, queue.name))
    return answer["messages"], answer["consumers"]


async def delete_remote(core, queue, *, if_unused: bool, if_empty: bool) -> int:
    """Delete `queue` at its owner: returns how many messages were ready in it."""
    answer, _ = await core.peers.ask(owner_of(core, queue.bundle), request_head(
        DELETE, queue.bundle, queue.name, if_unused=if_unused, if_empty=if_empty))
    return answer["messages"]

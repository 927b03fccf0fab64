"""Messages for a queue another broker of the cluster serves.

Published by a client of this broker: they go over the peer link to the owner
(core/cluster/peers.py), in order, one request in flight per queue (`RemotePublisher`); the owner
appends them as a publish of its own (length limits, consumers) and answers once they are durable
there, each message with its own outcome (a full reject-publish queue refuses some). A declare or a
message count of such a queue is asked of the owner the same way.

Dead-lettered into it, or released into it by the delayed store: they go to the owner through its
mailbox (core/cluster/mailbox.py), which outlives both brokers; only once they are durable there
does the sender count them as delivered.

A request carries up to MAX_REQUEST_BYTES of records (base64 in JSON, under the metadata store's
value limit); a single record larger than that cannot be forwarded, and its sender keeps retrying
(logged) until the queue's bundle comes to its broker. A request is named after its content, so a
sender asking again after a failure finds the first one, answered or not.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

from core.cluster.bundles import Bundle
from core.errors import CoreError, NotOwner, NotSent
from core.queues import arguments as stored_arguments
from core.queues.limits import PublishRefused
from core.records.builder import Record

PUBLISH = "queue-publish"
DECLARE = "queue-declare"
COUNTS = "queue-counts"
DELETE = "queue-delete"
MAX_REQUEST_BYTES = 512 << 10
MAX_PEER_BATCH = 4096             # messages of one publish request over a peer link
MAX_PEER_WAITING = 4 * MAX_PEER_BATCH   # messages waiting for the link before publishers wait
OWNER_WAIT_S = 30.0               # how long publishes wait for a queue's owner (failover) before failing
RETRY_FIRST_S, RETRY_MAX_S = 0.05, 1.0


def _text(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def encode_records(records: list[Record]) -> list[list]:
    return [[r.timestamp_ms, _text(r.key), _text(r.value), [[name, _text(value)] for name, value in r.headers]]
            for r in records]


def decode_records(rows: list[list]) -> list[Record]:
    return [Record(timestamp, _bytes(key), _bytes(value), tuple((name, _bytes(v)) for name, v in headers))
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


def owner_of(core, bundle: Bundle) -> Any:
    owner = core.cluster.owner(bundle)
    if owner is None or owner.id == core.cluster.local.id:
        raise NotOwner(f"bundle {bundle} has no other live owner now (it is moving)")
    return owner


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
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((record, future))
        if len(self._waiting) >= MAX_PEER_WAITING:
            self._writable.clear()
        if self._sending is None:
            self._sending = asyncio.ensure_future(self._send())
        return future

    async def _send(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting[:MAX_PEER_BATCH], self._waiting[MAX_PEER_BATCH:]
                if len(self._waiting) < MAX_PEER_WAITING:
                    self._writable.set()
                try:
                    answer = await self._ask(json.dumps(encode_records([record for record, _ in batch])).encode())
                except CoreError as exc:
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

    async def _ask(self, payload: bytes) -> dict:
        """One publish request. While the queue has no owner, or its owner cannot be reached or
        does not serve it yet (a failover), nothing was appended: asked again, for up to
        OWNER_WAIT_S, as a RabbitMQ channel holds its publishes while a queue elects a leader."""
        bundle, deadline, pause = self._queue.bundle, time.monotonic() + OWNER_WAIT_S, RETRY_FIRST_S
        while True:
            try:
                answer, _ = await self._core.peers.ask(owner_of(self._core, bundle),
                                                       request_head(PUBLISH, bundle, self._queue.name), payload)
                return answer
            except (NotOwner, NotSent):
                if time.monotonic() + pause > deadline or self._queue.deleted:
                    raise
            if self._core.cluster.owns(bundle):
                raise NotOwner(f"queue '{self._queue.name}' came to this broker with publishes on their way "
                               "to the previous owner")
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_MAX_S)


async def declare_remote(core, bundle: Bundle, name: str, *, durable: bool, auto_delete: bool,
                         arguments: Mapping[str, Any]) -> dict:
    """Declare queue `name` (of `bundle`, served by another broker) at its owner: returns the stored
    QueueInfo document."""
    answer, _ = await core.peers.ask(owner_of(core, bundle), request_head(
        DECLARE, bundle, name, durable=durable, auto_delete=auto_delete, arguments=stored_arguments.to_json(arguments)))
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

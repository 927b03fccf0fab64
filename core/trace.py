"""Message trace: what happened to a message, whichever protocol wrote and read it.

Off by default; on for a namespace with its policy `trace = true`. When on, each partition of the
namespace notes, per append and per read (never per record):

    produced   offsets first..last stored, when, and by which client connection
    read       offsets first..last read for a consumer (a Kafka fetch, an AMQP queue's dispatch)

and each AMQP queue (a shared subscription) what it does with its messages, per message or per
contiguous run of offsets, naming the queue:

    delivered       to which consumer (tag, connection, client) and whether redelivered
    acked           acknowledged by the consumer (or its channel)
    requeued        given back (rejected with requeue, or its consumer or channel went)
    rejected        rejected without requeue (then dead-lettered or dropped, below)
    dead-lettered   on its way to the queue's dead-letter exchange, with the reason
    dropped         dead with nowhere to go (no dead-letter exchange), with the reason

The client is the connection whose task did the append or read: protocol adapters set
CURRENT_CLIENT once per connection (a context variable, so it costs nothing per message). The
events are records of the namespace's own topic TRACE_TOPIC (key "<topic>/<partition>", value
JSON), written in the background in batches, so tracing adds no wait to a produce. Acknowledgement
comes from the subscriptions' cursors at the time of asking (committed position and acked ranges).

When off, the cost on the hot path is one attribute test per append and per read.
Finding a message's events scans TRACE_TOPIC from its start (there is no index).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
from typing import Any

from core.errors import CoreError, TopicExists, UnknownTopic
from core.names import TopicName
from core.query import MessageQuery, find_messages
from core.records.builder import Record, build_batch

log = logging.getLogger("gateway.core.trace")

TRACE_TOPIC = "__trace"
FLUSH_S = 0.2
MAX_PENDING = 100_000   # events waiting for the trace topic; beyond, they are dropped (and counted)

CURRENT_CLIENT: contextvars.ContextVar[Any] = contextvars.ContextVar("gateway_client", default=None)


class Tracer:
    """One namespace's trace writer; owned by the event loop."""

    def __init__(self, core, tenant: str, namespace: str) -> None:
        self._core = core
        self._topic = TopicName(tenant, namespace, TRACE_TOPIC)
        self._pending: list[Record] = []
        self._flusher: asyncio.Task | None = None
        self.dropped = 0

    def produced(self, topic: str, partition: int, first: int, last: int) -> None:
        self._note("produced", topic, partition, first, last, CURRENT_CLIENT.get())

    def read(self, topic: str, partition: int, first: int, last: int) -> None:
        self._note("read", topic, partition, first, last, CURRENT_CLIENT.get())

    def queued(self, where: tuple[str, int], kind: str, offsets: list[int], *, queue: str,
               consumer: Any = None, attributed: bool = True, **details: Any) -> None:
        """A queue's event about its messages at `offsets` of partition `where` (one per run). The
        client is the consumer's, else (`attributed`) the connection whose task this is (a
        basic.get, an ack, a reject); dead messages are nobody's doing."""
        topic, partition = where
        client = getattr(consumer, "client", None)
        if client is None and attributed:
            client = CURRENT_CLIENT.get()
        extra = {"queue": queue, **details}
        if hasattr(consumer, "tag"):
            extra["consumer_tag"] = consumer.tag
        for first, last in _runs(offsets):
            self._note(kind, topic, partition, first, last, client, extra)

    def _note(self, kind: str, topic: str, partition: int, first: int, last: int, client: Any,
              extra: dict[str, Any] | None = None) -> None:
        name = topic.rsplit("/", 1)[-1]
        if name == TRACE_TOPIC:
            return   # the trace's own writes and reads are not traced
        if len(self._pending) >= MAX_PENDING:
            self.dropped += 1
            return
        event = {"event": kind, "first": first, "last": last, **(extra or {})}
        if client is not None:
            event.update(protocol=client.protocol, client_id=client.client_id, address=client.address,
                         user=client.user, connection=client.id)
        now_ms = self._core.clock.now_ms()
        self._pending.append(Record(now_ms, f"{name}/{partition}".encode(), json.dumps(event).encode()))
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush(), name="trace-flush")

    async def _flush(self) -> None:
        try:
            await asyncio.sleep(FLUSH_S)
            while self._pending:
                records, self._pending = self._pending, []
                try:
                    partition = await self._partition()
                    await partition.append(build_batch(records))
                except CoreError as exc:
                    self.dropped += len(records)
                    log.warning("writing %d trace events of %s failed: %s", len(records), self._topic, exc)
        finally:
            self._flusher = None

    async def _partition(self):
        try:
            return await self._core.partition(self._topic, 0)
        except UnknownTopic:
            try:
                await self._core.registry.create_topic(self._topic, 1)
            except TopicExists:
                pass   # created meanwhile
            return await self._core.partition(self._topic, 0)

    async def close(self) -> None:
        if self._flusher is not None:
            await self._flusher


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    """Sorted offsets as (first, last) runs of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for offset in sorted(offsets):
        if runs and runs[-1][1] + 1 == offset:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs


async def trace_message(core, topic: TopicName, partition: int, offset: int, *,
                        scan_bytes: int = 64 << 20) -> dict[str, Any]:
    """Every traced event that covers the message, and each subscription's acknowledgement of it."""
    trace = TopicName(topic.tenant, topic.namespace, TRACE_TOPIC)
    key = f"{topic.topic}/{partition}".encode()
    events = []
    try:
        found = await find_messages(core, trace, MessageQuery(key=key, limit=1000, scan_bytes=scan_bytes))
    except CoreError:
        found = None   # never traced: no trace topic
    for message in found.messages if found is not None else ():
        event = json.loads(message.record.value)
        if event["first"] <= offset <= event["last"]:
            events.append({"at_ms": message.record.timestamp_ms, **event})
    return {"events": events, "subscriptions": await _acknowledgements(core, topic, partition, offset),
            "complete": found is None or found.complete}


async def _acknowledgements(core, topic: TopicName, partition: int, offset: int) -> list[dict[str, Any]]:
    found = []
    for cursor in await core.metadata.children(f"/cursors/{topic.path}/{partition}"):
        node = await core.metadata.get(f"/cursors/{topic.path}/{partition}/{cursor}")
        if node is None:
            continue
        doc = json.loads(node.value)
        acked = offset < doc["committed"] or any(first <= offset < end for first, end in doc.get("acked", ()))
        delivered = offset < doc.get("delivered", doc["committed"])
        found.append({"cursor": cursor, "acknowledged": acked, "delivered": delivered or acked,
                      "position": doc["committed"], "updated_ms": doc.get("updated_ms")})
    return found

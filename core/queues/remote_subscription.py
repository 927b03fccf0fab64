"""A queue another broker of the cluster serves, consumed through this one: `RemoteSubscription`
stands in for its SharedSubscription (what an AMQP channel calls: add and remove consumers, get,
ack, reject, release) and carries each call over the peer link to the owner, where
core/queues/peer_requests.py keeps the consumers and what they hold.

Each consumer polls the owner (one poll in flight, answered as soon as the queue hands it
something) while it has room here, so the owner's prefetch window and this broker's output
back-pressure both hold. Acknowledgements, rejections, cancels and releases go in order, as one
request at a time carrying everything that piled up meanwhile. A link or an owner lost cancels the
consumers (basic.cancel: the client consumes again, from the next owner); what they held is handed
out again there, so it may be delivered twice (at least once, as a RabbitMQ consumer whose
connection dropped).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Hashable

from core.errors import CoreError
from core.cluster.owners import owner_of
from core.queues.forwarding import request_head
from core.queues.peer_requests import CONSUME, CONTROL, GET, POLL, PURGE, unpack_messages
from core.queues.interface import Consumer
from core.queues.message import QueuedMessage

log = logging.getLogger("gateway.core.queues")

_names = itertools.count(1)


class RemoteSubscription:
    def __init__(self, core, queue) -> None:
        self._core = core
        self._queue = queue
        self._consumers: dict[Consumer, str] = {}       # consumer here -> its name at the owner
        self._polls: dict[Consumer, asyncio.Task] = {}
        self._holders: dict[Hashable, str] = {}         # a channel holding messages -> its name there
        self._ops: list[list] = []
        self._sending: asyncio.Task | None = None
        self._sent = asyncio.Event()
        self._failed: CoreError | None = None      # of the last control request, for save_position
        self._room = asyncio.Event()

    async def _ask(self, kind: str, **fields) -> tuple[dict, bytes]:
        queue = self._queue
        return await self._core.peers.ask(owner_of(self._core, queue.bundle),
                                          request_head(kind, queue.bundle, queue.name, **fields))

    @property
    def consumers(self) -> list[Consumer]:
        return list(self._consumers)

    # --- consumers --------------------------------------------------------------------------------

    async def add_consumer(self, consumer: Consumer, *, exclusive: bool = False) -> None:
        name = f"c{next(_names)}"
        await self._ask(CONSUME, consumer=name, prefetch=consumer.prefetch, auto_ack=consumer.auto_ack,
                        priority=getattr(consumer, "priority", 0), exclusive=exclusive)
        self._consumers[consumer] = name
        self._polls[consumer] = asyncio.ensure_future(self._poll(consumer, name))

    async def _poll(self, consumer: Consumer, name: str) -> None:
        try:
            while consumer in self._consumers:
                while not consumer.can_deliver():
                    self._room.clear()
                    await self._room.wait()
                answer, payload = await self._ask(POLL, consumer=name)
                if self._consumers.get(consumer) != name:
                    return      # removed meanwhile: what came is the owner's to hand out again
                for message in unpack_messages(answer, payload):
                    consumer.deliver(message)
                if answer["cancelled"]:
                    break
        except CoreError as exc:
            log.info("consumer of queue %s at its owner is gone: %s", self._queue.name, exc)
        if self._consumers.pop(consumer, None) is not None:
            self._polls.pop(consumer, None)
            consumer.queue_deleted()

    def remove_consumer(self, consumer: Consumer, *, holder: Hashable | None = None) -> None:
        name = self._consumers.pop(consumer, None)
        poll = self._polls.pop(consumer, None)
        if poll is not None:
            poll.cancel()
        if name is not None:
            self._control(["cancel", name, None if holder is None else self._holder(holder)])

    def wake(self) -> None:
        self._room.set()

    # --- what a channel holds -------------------------------------------------------------------

    def _holder(self, owner: Hashable) -> str:
        name = self._holders.get(owner)
        if name is None:
            name = self._holders[owner] = f"h{next(_names)}"
        return name

    async def get(self, owner: Hashable, *, auto_ack: bool) -> QueuedMessage | None:
        await self.settled()     # a reject with requeue before this get is seen by it
        messages = unpack_messages(*await self._ask(GET, holder=self._holder(owner), auto_ack=auto_ack))
        return messages[0] if messages else None

    def ack(self, offsets: list[int]) -> None:
        self._control(["ack", offsets])

    def reject(self, offsets: list[int], *, requeue: bool) -> None:
        self._control(["reject", offsets, requeue])

    def release(self, owner: Hashable) -> None:
        name = self._holders.pop(owner, None)
        if name is not None:
            self._control(["release", name])

    async def save_position(self) -> None:
        """Durable at the owner when it returns (a transaction's acknowledgements at tx.commit)."""
        self._failed = None
        self._control(["save"])
        await self.settled()
        if self._failed is not None:
            raise self._failed

    async def purge(self) -> int:
        await self.settled()
        answer, _ = await self._ask(PURGE)
        return answer["purged"]

    # --- in order, one request at a time --------------------------------------------------------

    def _control(self, op: list) -> None:
        self._ops.append(op)
        self._sent.clear()
        if self._sending is None:
            self._sending = asyncio.ensure_future(self._send())

    async def _send(self) -> None:
        try:
            while self._ops:
                ops, self._ops = self._ops, []
                try:
                    await self._ask(CONTROL, ops=ops)
                except CoreError as exc:   # the owner is gone: it hands out again what was held
                    self._failed = exc
                    log.info("acknowledgements for queue %s not delivered to its owner: %s", self._queue.name, exc)
        finally:
            self._sending = None
            self._sent.set()

    async def settled(self) -> None:
        """Once every acknowledgement, rejection and cancel sent so far was answered by the owner."""
        while self._sending is not None:
            await self._sent.wait()

    # --- the queue goes -------------------------------------------------------------------------

    async def close(self) -> None:
        for consumer in list(self._consumers):
            self.remove_consumer(consumer)
        for owner in list(self._holders):
            self.release(owner)
        await self.settled()

    def discard(self) -> None:
        for poll in self._polls.values():
            poll.cancel()
        self._consumers.clear()
        self._polls.clear()

"""What a channel's handlers use of their connection: one session per connection, opened with the vhost.

Handlers get a Channel (protocols/amqp/channel.py) and through `channel.session` this: the vhost's
queues and exchanges (`space`), the user's permissions (`access`), the owner of the exclusive
queues the connection declares, the clock (and the coarse one deliveries are stamped with, for
the acknowledgement timeout), the output (`write` of what `machine` encodes), and the
connection's publishes, tracked so that a later method sees them and back-pressure knows the
queues. It knows nothing of sockets or tasks: the adapter (server.py) makes it and reads it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from core.clock import Clock
from core.queues.ack_timeout import DeliveryClock
from core.queues.queue import Queue
from core.queues.service import QueueNamespace
from protocols.amqp.machine.connection import AmqpServerConnection
from protocols.amqp.permissions import ResourceAccess


class Session:
    def __init__(self, machine: AmqpServerConnection, write: Callable[[bytes], None], clock: Clock,
                 writable: Callable[[], bool], delivery_clock: DeliveryClock, flush: Callable[[], None]) -> None:
        self.machine = machine
        self.write = write
        self.flush = flush          # send what was written now, not at the end of the event-loop turn
        self.clock = clock
        self.delivery_clock = delivery_clock          # ticked by the adapter
        self._writable = writable
        self.space: QueueNamespace | None = None      # set when the vhost is open
        self.access: ResourceAccess | None = None
        self.owner = self                             # of the exclusive queues the connection declares
        self.published: set = set()                   # queues (or held stores) published to since last read
        self._unsettled: dict[Queue, asyncio.Future] = {}   # the latest publish to each queue, until settled
        self.client = None                            # the core's ClientConnection record, for operators

    @property
    def username(self) -> str:
        return self.machine.username

    @property
    def vhost(self) -> str:
        return self.machine.vhost

    @property
    def writable(self) -> bool:
        """False while the connection's output is backed up."""
        return self._writable()

    def published_to(self, queues: list, durable: list[asyncio.Future] | tuple = ()) -> None:
        """A publish went to `queues` (with `durable`: one future each, done once settled there)."""
        self.published.update(queues)
        unsettled = self._unsettled
        for queue, future in zip(queues, durable):
            if unsettled.get(queue) is not future:    # once per batch: its publishes share the future
                unsettled[queue] = future
                future.add_done_callback(lambda done, queue=queue: self._settled(queue, done))

    def _settled(self, queue: Queue, future: asyncio.Future) -> None:
        if self._unsettled.get(queue) is future:
            del self._unsettled[queue]

    async def publishes_settled(self, queue: Queue) -> None:
        """Wait until the connection's publishes to `queue` so far are stored (or failed): a method
        after a publish sees it, as a RabbitMQ channel's methods take effect in order. Batches of a
        queue settle in order, so the latest one is enough."""
        future = self._unsettled.get(queue)
        if future is not None and not future.done():
            await asyncio.wait((future,))

"""One open AMQP channel's state: its consumers, unacknowledged deliveries, QoS, flow and confirms.

Delivery tags count up from 1 per channel. Every unacknowledged delivery (to a consumer, or from
basic.get) is remembered by tag with its queue, offset and coarse delivery time, so ack / nack /
reject (single or multiple) turn into the core's per-offset acknowledgements, and the oldest one
tells whether the channel kept a delivery past its acknowledgement timeout
(core/queues/ack_timeout.py). Closing the channel hands everything it held back to its queues,
which redeliver it first, marked redelivered.

Publisher confirms: each publish in confirm mode gets the next sequence number and waits for its
queues' appends to be durable; confirms go out in sequence order, several at once as one
basic.ack with multiple=true where they are consecutive, and a failed append is a basic.nack.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from collections import OrderedDict, deque
from dataclasses import dataclass

from core.queues.ack_timeout import timeout_for
from core.queues.policy import QUORUM
from core.queues.queue import Queue
from core.queues.subscription import QueuedMessage
from protocols.amqp.machine.errors import ChannelError
from protocols.amqp.records import message_envelope
from protocols.amqp.session import Session
from protocols.amqp.spec import ReplyCode


log = logging.getLogger("gateway.amqp")


def generated_name(prefix: str) -> str:
    """RabbitMQ-style server-generated names: "amq.gen-" / "amq.ctag-" and 22 URL-safe characters."""
    return prefix + base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()


def counts_deliveries(queue: Queue) -> bool:
    """A quorum queue's redeliveries carry x-delivery-count."""
    return queue.policy.queue_type == QUORUM


@dataclass(slots=True)   # not frozen: a frozen one costs ~2 µs more to build, once per delivery
class Unacked:
    queue: Queue
    offset: int
    stamp: int          # when it went out (DeliveryClock.stamp)


class ChannelConsumer:
    """A basic.consume: the core's Consumer for one queue, delivering on this channel."""

    __slots__ = ("tag", "queue", "channel", "prefetch", "auto_ack", "priority", "counts_deliveries")

    def __init__(self, tag: str, queue: Queue, channel: "Channel", prefetch: int, auto_ack: bool,
                 priority: int = 0) -> None:
        self.tag = tag
        self.queue = queue
        self.channel = channel
        self.prefetch = prefetch
        self.auto_ack = auto_ack
        self.priority = priority      # basic.consume's x-priority: served before lower ones
        self.counts_deliveries = counts_deliveries(queue)

    @property
    def client(self):
        """The connection's record in the core's registry (who consumes, for the admin views)."""
        return self.channel.session.client

    def can_deliver(self) -> bool:
        return self.channel.can_deliver()

    def deliver(self, message: QueuedMessage) -> None:
        self.channel.deliver(self, message)

    def flush(self) -> None:
        self.channel.session.flush()

    def queue_deleted(self) -> None:
        self.channel.cancelled_by_server(self)


class Channel:
    def __init__(self, session: Session, number: int) -> None:
        self.session = session      # what the handlers use of the connection (protocols/amqp/session.py)
        self.number = number
        self.consumers: dict[str, ChannelConsumer] = {}
        self.unacked: OrderedDict[int, Unacked] = OrderedDict()
        self._next_tag = 1
        self.consumer_prefetch = 0          # basic.qos global=false: for consumers created afterwards
        self.channel_prefetch = 0           # basic.qos global=true: shared by the channel's deliveries
        self.flow_active = True             # channel.flow from the client
        self.most_recent_queue = ""         # the "" shortcut of queue.bind / basic.consume / basic.get
        self.held_in: set[Queue] = set()    # queues holding unacknowledged messages in the channel's name
                                            # (basic.get, and the deliveries of cancelled consumers)
        # publisher confirms
        self.confirming = False
        self.tx = None                      # a protocols.amqp.tx.Transaction after tx.select
        self._publish_seq = 0
        self._confirms: deque[tuple[int, asyncio.Future | None]] = deque()
        self._confirm_flush_scheduled = False
        self._watched: asyncio.Future | None = None     # the durable future last given a callback
        self.closed = False

    # --- output ---------------------------------------------------------------------------------

    def send(self, method_name: str, /, **args) -> None:
        self.session.write(self.session.machine.send_method(self.number, method_name, **args))

    def can_deliver(self) -> bool:
        if not self.flow_active or self.closed or not self.session.writable:
            return False
        return not self.channel_prefetch or len(self.unacked) < self.channel_prefetch

    def _take_tag(self) -> int:
        tag = self._next_tag
        self._next_tag += 1
        return tag

    def deliver(self, consumer: ChannelConsumer, message: QueuedMessage) -> None:
        tag = self._take_tag()
        if not consumer.auto_ack:
            self.unacked[tag] = Unacked(consumer.queue, message.offset, self.session.delivery_clock.stamp)
        exchange, routing_key, properties = message_envelope(message, counts_deliveries=consumer.counts_deliveries)
        try:
            self.session.write(self.session.machine.send_content(
                self.number, "basic.deliver", properties, message.value or b"", consumer_tag=consumer.tag,
                delivery_tag=tag, redelivered=message.redelivered, exchange=exchange, routing_key=routing_key))
        except Exception:
            # Never into the queue's dispatcher (another connection's task may be running it): the
            # delivery stays unacknowledged here and goes back to the queue with the channel.
            log.exception("delivering to consumer %r on channel %d failed", consumer.tag, self.number)

    def send_got(self, queue: Queue, message: QueuedMessage, *, auto_ack: bool, message_count: int) -> None:
        tag = self._take_tag()
        if not auto_ack:
            self.unacked[tag] = Unacked(queue, message.offset, self.session.delivery_clock.stamp)
        exchange, routing_key, properties = message_envelope(message, counts_deliveries=counts_deliveries(queue))
        self.session.write(self.session.machine.send_content(
            self.number, "basic.get-ok", properties, message.value or b"", delivery_tag=tag,
            redelivered=message.redelivered, exchange=exchange, routing_key=routing_key,
            message_count=message_count))

    def cancelled_by_server(self, consumer: ChannelConsumer) -> None:
        """The consumer's queue was deleted: as RabbitMQ, tell clients that understand basic.cancel."""
        if self.consumers.get(consumer.tag) is not consumer:
            return
        del self.consumers[consumer.tag]
        if self.session.machine.client_capabilities.get("consumer_cancel_notify") is True:
            self.send("basic.cancel", consumer_tag=consumer.tag, nowait=True)

    def wake_consumers(self) -> None:
        """Room again (flow on, acks, output drained): let the queues hand out more."""
        for queue in {consumer.queue for consumer in self.consumers.values()}:
            if queue.subscription is not None and not queue.deleted:
                queue.subscription.wake()

    def cancel(self, consumer: ChannelConsumer) -> Queue:
        """basic.cancel: no more deliveries; what it was given stays unacknowledged on the channel."""
        del self.consumers[consumer.tag]
        queue = consumer.queue
        if queue.subscription is not None and not queue.deleted:
            queue.subscription.remove_consumer(consumer, holder=self)
            self.held_in.add(queue)
        return queue

    # --- acknowledgements -----------------------------------------------------------------------

    def _settled(self, delivery_tag: int, multiple: bool) -> list[Unacked]:
        """Remove and return the deliveries an ack/nack/reject names (PRECONDITION_FAILED if unknown)."""
        unacked = self.unacked
        if multiple and delivery_tag == 0:
            settled = list(unacked.values())
            unacked.clear()
            return settled
        if delivery_tag not in unacked:
            raise ChannelError(ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {delivery_tag}")
        if not multiple:
            return [unacked.pop(delivery_tag)]
        settled = []
        while unacked:
            tag = next(iter(unacked))
            if tag > delivery_tag:
                break
            settled.append(unacked.popitem(last=False)[1])
        return settled

    def ack(self, delivery_tag: int, multiple: bool) -> None:
        self.ack_all([(delivery_tag, multiple)])

    def ack_all(self, acks: list[tuple[int, bool]]) -> None:
        """basic.acks (delivery tag, multiple) read together, applied to each queue at once: one
        dispatch round refills the consumers' windows, not one per ack. On an unknown tag those
        before it still count, as if they had come one by one."""
        settled: list[Unacked] = []
        try:
            for delivery_tag, multiple in acks:
                settled += self._settled(delivery_tag, multiple)
        finally:
            for queue, offsets in _by_queue(settled).items():
                if not queue.deleted and queue.subscription is not None:
                    queue.subscription.ack(offsets)
            if self.channel_prefetch:
                self.wake_consumers()

    def reject(self, delivery_tag: int, multiple: bool, requeue: bool) -> None:
        for queue, offsets in _by_queue(self._settled(delivery_tag, multiple)).items():
            if not queue.deleted and queue.subscription is not None:
                queue.subscription.reject(offsets, requeue=requeue)
        if self.channel_prefetch:
            self.wake_consumers()

    def recover(self) -> None:
        """basic.recover with requeue: everything unacknowledged goes back to its queue."""
        settled = list(self.unacked.values())
        self.unacked.clear()
        for queue, offsets in _by_queue(settled).items():
            if not queue.deleted and queue.subscription is not None:
                queue.subscription.reject(offsets, requeue=True)

    def overdue_timeout(self, default_ms: int | None) -> int | None:
        """The acknowledgement timeout the oldest unacknowledged delivery has exceeded, None if it has
        not (RabbitMQ looks at that one only, with the timeout of its queue)."""
        if not self.unacked:
            return None
        oldest = next(iter(self.unacked.values()))
        timeout = timeout_for(oldest.queue.policy.consumer_timeout_ms, default_ms)
        return timeout if self.session.delivery_clock.overdue(oldest.stamp, timeout) else None

    # --- publisher confirms ---------------------------------------------------------------------

    def published(self, durable: list[asyncio.Future]) -> None:
        """Track one publish for confirms (a no-op outside confirm mode)."""
        if not self.confirming:
            return
        self._publish_seq += 1
        future = durable[0] if len(durable) == 1 else (_all_of(durable) if durable else None)
        self._confirms.append((self._publish_seq, future))
        if future is None or future.done():
            self._schedule_confirms()
        elif future is not self._watched:    # once per batch: its publishes share the future
            self._watched = future
            future.add_done_callback(self._on_durable)

    def _on_durable(self, _future: asyncio.Future) -> None:
        self._schedule_confirms()

    def _schedule_confirms(self) -> None:
        # One pass per loop turn: a whole batch becoming durable is one basic.ack multiple=true.
        if not self._confirm_flush_scheduled:
            self._confirm_flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._send_confirms)

    def _send_confirms(self) -> None:
        self._confirm_flush_scheduled = False
        if self.closed:
            return
        confirms = self._confirms
        run_ok: bool | None = None
        run_first = run_last = 0
        while confirms:
            seq, future = confirms[0]
            if future is not None and not future.done():
                break
            confirms.popleft()
            ok = future is None or (not future.cancelled() and future.exception() is None)
            if run_ok is not None and ok != run_ok:
                self._confirm(run_ok, run_first, run_last)
                run_ok = None
            if run_ok is None:
                run_ok, run_first = ok, seq
            run_last = seq
        if run_ok is not None:
            self._confirm(run_ok, run_first, run_last)

    def _confirm(self, ok: bool, first: int, last: int) -> None:
        multiple = last > first
        if ok:
            self.send("basic.ack", delivery_tag=last, multiple=multiple)
        else:
            self.send("basic.nack", delivery_tag=last, multiple=multiple, requeue=False)

    # --- closing --------------------------------------------------------------------------------

    def close(self) -> list[Queue]:
        """Give back everything held; returns the queues that lost a consumer (auto-delete check)."""
        self.closed = True
        touched = []
        for consumer in self.consumers.values():
            queue = consumer.queue
            if queue.subscription is not None and not queue.deleted:
                queue.subscription.remove_consumer(consumer)
                touched.append(queue)
        self.consumers.clear()
        for queue in self.held_in:
            if queue.subscription is not None and not queue.deleted:
                queue.subscription.release(self)
        self.held_in.clear()
        self.unacked.clear()
        self._confirms.clear()
        return touched


def _by_queue(settled: list[Unacked]) -> dict[Queue, list[int]]:
    grouped: dict[Queue, list[int]] = {}
    for entry in settled:
        grouped.setdefault(entry.queue, []).append(entry.offset)
    return grouped


def _all_of(futures: list[asyncio.Future]) -> asyncio.Future:
    """Done when every future is; failed if any failed."""
    combined = asyncio.get_running_loop().create_future()
    remaining = len(futures)

    def one_done(future: asyncio.Future) -> None:
        nonlocal remaining
        remaining -= 1
        if combined.done():
            return
        if future.cancelled() or future.exception() is not None:
            combined.set_exception(future.exception() if not future.cancelled() else asyncio.CancelledError())
        elif remaining == 0:
            combined.set_result(None)

    for future in futures:
        future.add_done_callback(one_done)
    combined.add_done_callback(lambda f: f.cancelled() or f.exception())
    return combined

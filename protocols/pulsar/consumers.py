"""A Pulsar consumer as a consumer of the core's shared subscription (core/queues/subscription.py).

Flow control is Pulsar's: the client grants permits (FLOW) and each message sent uses one; the
subscription hands a consumer messages only while it has permits and its connection's output is
not backed up, so a consumer that grants none holds nothing on the broker. The consumer keeps the
offsets it was handed and not yet acknowledged, for cumulative acks and redelivery.

A message goes out as its own entry: message id (ledger 0, entry = its offset), never as a batch;
the ledger of every id the gateway hands out is 0 (see docs/PULSAR.md, "Message ids").
"""

from __future__ import annotations

from collections.abc import Callable

from core.names import TopicName
from protocols.pulsar.codec.frames import encode_command, encode_payload_command
from protocols.pulsar.codec.pulsar_wire_pb2 import BaseCommand
from protocols.pulsar.records import to_metadata

LEDGER = 0


class PulsarConsumer:
    prefetch = 0          # the permits bound it, not a count of unacknowledged messages
    auto_ack = False

    def __init__(self, consumer_id: int, topic: TopicName, index: int, subscription_name: str, subscription,
                 write: Callable[[bytes], None], writable: Callable[[], bool], flush: Callable[[], None],
                 priority: int = 0) -> None:
        self.consumer_id = consumer_id
        self.topic = topic
        self.index = index
        self.subscription_name = subscription_name
        self.subscription = subscription
        self.priority = priority
        self.permits = 0
        self.outstanding: set[int] = set()     # handed out, not acknowledged or given back
        self._write = write
        self._writable = writable
        self.flush = flush
        self.closed = False
        self.on_closed: Callable[[PulsarConsumer], None] = lambda consumer: None   # set by its session
        self.durable = True          # False: a reader's, deleted when it goes

    # --- the core's Consumer protocol -----------------------------------------------------------

    def can_deliver(self) -> bool:
        return self.permits > 0 and not self.closed and self._writable()

    def deliver(self, message) -> None:
        self.permits -= 1
        self.outstanding.add(message.offset)
        command = BaseCommand(type=BaseCommand.MESSAGE)
        body = command.message
        body.consumer_id = self.consumer_id
        body.message_id.ledgerId = LEDGER
        body.message_id.entryId = message.offset
        if message.deliveries:
            body.redelivery_count = message.deliveries
        metadata = to_metadata(message.timestamp_ms, message.key, message.value, message.headers, message.offset)
        self._write(encode_payload_command(command, metadata, message.value or b""))

    def queue_deleted(self) -> None:
        """The subscription went away under the consumer (another consumer unsubscribed with force,
        or a seek moved it): the client is told to close it, and subscribes again if it wants."""
        if self.closed:
            return
        self.closed = True
        self.outstanding.clear()
        self.on_closed(self)
        command = BaseCommand(type=BaseCommand.CLOSE_CONSUMER)
        command.close_consumer.consumer_id = self.consumer_id
        command.close_consumer.request_id = (1 << 64) - 1     # Pulsar's -1: not an answer to a request
        self._write(encode_command(command))

    # --- what the client asks -------------------------------------------------------------------

    def grant(self, permits: int) -> None:
        self.permits += permits
        self.subscription.dispatch()

    def ack(self, offsets: list[int]) -> None:
        held = [offset for offset in offsets if offset in self.outstanding]
        self.outstanding.difference_update(held)
        if held:
            self.subscription.ack(held)

    def ack_up_to(self, offset: int) -> None:
        self.ack(sorted(o for o in self.outstanding if o <= offset))

    def redeliver(self, offsets: list[int] | None) -> None:
        """Give back the messages (all that it holds when None) to be handed out again."""
        if offsets is None:
            self.outstanding.clear()
            self.subscription.release(self)
            return
        held = [offset for offset in offsets if offset in self.outstanding]
        self.outstanding.difference_update(held)
        if held:
            self.subscription.reject(held, requeue=True)

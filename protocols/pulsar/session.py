"""The handlers of one connection's commands, after CONNECT: lookups, producers, consumers.

A command is handled to the end before the next one of its connection (the adapter awaits each),
except that storing a SEND and answering it are apart: the send is queued at once and its receipt
goes out when it is durable (producers.py), so a producer's sends pipeline.

Every call into the core goes through the broker's CorePort (core_port.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable

from protocols.pulsar.codec.batch import unpack
from protocols.pulsar.codec.errors import DecodeError
from protocols.pulsar.codec.frames import Frame, encode_command
from protocols.pulsar.codec.pulsar_wire_pb2 import (
    BaseCommand,
    ChecksumError,
    CommandSubscribe,
    ConsumerBusy,
    ConsumerNotFound,
    Exclusive,
    ExclusiveWithFencing,
    MessageIdData,
    NotAllowedError,
    ProducerBusy,
    TopicNotFound,
    UnknownError,
    WaitForExclusive,
)
from protocols.pulsar.core_port import EXCLUSIVE, FAILOVER, KEY_SHARED, SHARED, CoreError, ExclusiveUse
from protocols.pulsar.consumers import LEDGER, PulsarConsumer
from protocols.pulsar.errors import server_error
from protocols.pulsar.names import PulsarTopic, parse_namespace, parse_topic
from protocols.pulsar.producers import NO_ID, Producer
from protocols.pulsar.records import PRODUCER, SEQUENCE, to_record

log = logging.getLogger("gateway.pulsar")

SUBSCRIPTION_TYPES = {
    CommandSubscribe.Exclusive: EXCLUSIVE,
    CommandSubscribe.Shared: SHARED,
    CommandSubscribe.Failover: FAILOVER,
    CommandSubscribe.Key_Shared: KEY_SHARED,
}
DELAYED_LEDGER = 1       # the ledger of a receipt for a message held until its delivery time
_names = itertools.count()


class RequestFailed(Exception):
    """A request answered with Pulsar's ERROR: its ServerError code and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def offset_of(message_id: MessageIdData) -> int:
    """The partition offset a message id names: entry + batch index (see docs/PULSAR.md)."""
    return message_id.entryId + max(message_id.batch_index, 0)


class Session:
    def __init__(self, broker, write: Callable[[bytes], None], writable: Callable[[], bool],
                 flush: Callable[[], None]) -> None:
        self.broker = broker
        self.port = broker.port
        self._write = write
        self._writable = writable
        self._flush = flush
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, PulsarConsumer] = {}
        self.unstored_bytes = 0        # sent payloads not yet durable (the adapter stops reading past a limit)
        self._stored_waiter: asyncio.Future | None = None

    # --- dispatch ----------------------------------------------------------------------------------

    async def handle(self, frame: Frame) -> None:
        command = frame.command
        kind = command.type
        if kind == BaseCommand.SEND:
            await self._send(frame)
            return
        handler = _HANDLERS.get(kind)
        request_id = _request_id(command)
        if handler is None:
            name = BaseCommand.Type.Name(kind)
            log.info("pulsar: %s is not served", name)
            if request_id is not None:
                self._error(request_id, NotAllowedError, f"{name} is not served by this broker")
            return
        try:
            await handler(self, command)
        except RequestFailed as exc:
            if request_id is not None:
                self._error(request_id, exc.code, str(exc))
        except CoreError as exc:
            if request_id is not None:
                self._error(request_id, server_error(exc), str(exc))

    def _error(self, request_id: int, code: int, message: str) -> None:
        command = BaseCommand(type=BaseCommand.ERROR)
        command.error.request_id = request_id
        command.error.error = code
        command.error.message = message
        self._write(encode_command(command))

    def _success(self, request_id: int) -> None:
        command = BaseCommand(type=BaseCommand.SUCCESS)
        command.success.request_id = request_id
        self._write(encode_command(command))

    # --- connection-level --------------------------------------------------------------------------

    async def _ping(self, command: BaseCommand) -> None:
        pong = BaseCommand(type=BaseCommand.PONG)
        pong.pong.SetInParent()
        self._write(encode_command(pong))

    async def _pong(self, command: BaseCommand) -> None:
        pass     # the adapter noted that the peer answered

    # --- lookups ----------------------------------------------------------------------------------

    async def _partitioned_metadata(self, command: BaseCommand) -> None:
        ask = command.partitionMetadata
        answer = BaseCommand(type=BaseCommand.PARTITIONED_METADATA_RESPONSE)
        answer.partitionMetadataResponse.request_id = ask.request_id
        try:
            topic = parse_topic(ask.topic)
            count = None if topic.partition is not None else await self.port.partitions(topic.name)
        except CoreError as exc:
            answer.partitionMetadataResponse.response = answer.partitionMetadataResponse.Failed
            answer.partitionMetadataResponse.error = server_error(exc)
            answer.partitionMetadataResponse.message = str(exc)
        else:
            # one partition (or none yet, or one partition of a topic): Pulsar's non-partitioned topic
            answer.partitionMetadataResponse.partitions = count if count is not None and count > 1 else 0
            answer.partitionMetadataResponse.response = answer.partitionMetadataResponse.Success
        self._write(encode_command(answer))

    async def _lookup(self, command: BaseCommand) -> None:
        ask = command.lookupTopic
        answer = BaseCommand(type=BaseCommand.LOOKUP_RESPONSE)
        response = answer.lookupTopicResponse
        response.request_id = ask.request_id
        try:
            topic = parse_topic(ask.topic)
        except CoreError as exc:
            response.response = response.Failed
            response.error = server_error(exc)
            response.message = str(exc)
        else:
            # the broker the topic's bundle is assigned to, as Kafka's Metadata names leaders; this
            # one when it is the owner or none is known yet (the client then retries on ServiceNotReady)
            owner = self.port.owner(topic.name, topic.index)
            response.response = response.Connect
            response.brokerServiceUrl = self.broker.service_url if owner is None else _url(owner)
            response.authoritative = True
        self._write(encode_command(answer))

    async def _topics_of_namespace(self, command: BaseCommand) -> None:
        ask = command.getTopicsOfNamespace
        tenant, namespace = parse_namespace(ask.namespace)
        answer = BaseCommand(type=BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE)
        answer.getTopicsOfNamespaceResponse.request_id = ask.request_id
        for name in await self.port.topics(tenant, namespace):
            prefix = f"persistent://{tenant}/{namespace}/{name}"
            topic = parse_topic(prefix)
            count = await self.port.partitions(topic.name) or 1
            answer.getTopicsOfNamespaceResponse.topics.extend(
                [prefix] if count == 1 else [f"{prefix}-partition-{i}" for i in range(count)])
        self._write(encode_command(answer))

    async def _get_schema(self, command: BaseCommand) -> None:
        answer = BaseCommand(type=BaseCommand.GET_SCHEMA_RESPONSE)
        answer.getSchemaResponse.request_id = command.getSchema.request_id
        answer.getSchemaResponse.error_code = TopicNotFound     # Pulsar's answer for "no schema"
        answer.getSchemaResponse.error_message = "no schema is stored for this topic"
        self._write(encode_command(answer))

    async def _get_or_create_schema(self, command: BaseCommand) -> None:
        answer = BaseCommand(type=BaseCommand.GET_OR_CREATE_SCHEMA_RESPONSE)
        answer.getOrCreateSchemaResponse.request_id = command.getOrCreateSchema.request_id
        answer.getOrCreateSchemaResponse.schema_version = b""     # accepted, not stored (a gap)
        self._write(encode_command(answer))

    # --- producers --------------------------------------------------------------------------------

    async def _producer(self, command: BaseCommand) -> None:
        ask = command.producer
        existing = self.producers.get(ask.producer_id)
        if existing is not None and not existing.closed:
            raise RequestFailed(ProducerBusy, f"producer id {ask.producer_id} is in use on this connection")
        topic = await self._open_topic(ask.topic)
        name = ask.producer_name if ask.HasField("producer_name") and ask.producer_name else self._new_name()
        exclusive = ask.producer_access_mode in (Exclusive, WaitForExclusive, ExclusiveWithFencing)
        others = self.broker.producers_on(topic.name, topic.index)
        if others and (exclusive or any(p.exclusive for p in others)):
            raise RequestFailed(ProducerBusy, f"{topic.text()} has an exclusive producer or other producers")
        state = self.broker.dedup.get(topic.name, topic.index, name)
        if state is None:
            highest = await self.port.last_sequence(topic.name, topic.index, name, PRODUCER, SEQUENCE)
            state = self.broker.dedup.put(topic.name, topic.index, name, highest)
        producer = Producer(ask.producer_id, topic.name, topic.index, name, state,
                            lambda *receipt: self._receipt(ask.producer_id, *receipt),
                            lambda sequence_id, error: self._send_error(ask.producer_id, sequence_id, error))
        producer.exclusive = exclusive
        producer.on_closed_by_broker = self._closed_producer
        self.producers[ask.producer_id] = producer
        self.broker.producer_opened(producer)
        answer = BaseCommand(type=BaseCommand.PRODUCER_SUCCESS)
        answer.producer_success.request_id = ask.request_id
        answer.producer_success.producer_name = name
        answer.producer_success.last_sequence_id = state.highest_stored
        answer.producer_success.producer_ready = True
        self._write(encode_command(answer))

    def _new_name(self) -> str:
        return f"{self.broker.name_prefix}-{next(_names)}"

    def _closed_producer(self, producer: Producer) -> None:
        if self.producers.get(producer.producer_id) is producer:
            del self.producers[producer.producer_id]
        self._forget_producer(producer)
        command = BaseCommand(type=BaseCommand.CLOSE_PRODUCER)
        command.close_producer.producer_id = producer.producer_id
        command.close_producer.request_id = NO_ID
        self._write(encode_command(command))

    async def _close_producer(self, command: BaseCommand) -> None:
        ask = command.close_producer
        producer = self.producers.pop(ask.producer_id, None)
        if producer is not None:
            self._forget_producer(producer)
        self._success(ask.request_id)

    def _forget_producer(self, producer: Producer) -> None:
        producer.closed = True
        self.broker.producer_closed(producer)

    async def _send(self, frame: Frame) -> None:
        send = frame.command.send
        producer = self.producers.get(send.producer_id)
        if producer is None or producer.closed:
            log.info("pulsar: SEND for unknown producer %d", send.producer_id)
            return     # Pulsar drops it too: the client's send times out and it recreates the producer
        highest = max(send.highest_sequence_id, send.sequence_id)
        if not frame.checksum_ok:
            self._send_error(send.producer_id, send.sequence_id, None, code=ChecksumError,
                             message="the message's checksum does not match")
            return
        if producer.is_duplicate(send.sequence_id):
            producer.duplicate(send.sequence_id, highest)
            return
        metadata = frame.metadata
        if metadata is None:
            raise DecodeError("SEND without message metadata")
        messages = unpack(metadata, frame.payload, self.broker.max_message_bytes)
        if not messages:
            producer.duplicate(send.sequence_id, highest)     # every message compacted out: nothing to store
            return
        records = [to_record(m, metadata.publish_time, producer.name,
                             m.sequence_id if m.sequence_id is not None else send.sequence_id + i)
                   for i, m in enumerate(messages)]
        if metadata.HasField("deliver_at_time") and metadata.deliver_at_time > self.port.clock.now_ms():
            stored = _future(self.port.hold(producer.topic, producer.index, records, metadata.deliver_at_time))
            ledger = DELAYED_LEDGER
        else:
            stored = _future(self.port.publish(producer.topic, producer.index, records))
            ledger = 0
        size = len(frame.payload)
        self.unstored_bytes += size
        stored.add_done_callback(lambda _: self._stored(size))
        producer.sent(send.sequence_id, highest, stored, ledger=ledger)

    def _stored(self, size: int) -> None:
        self.unstored_bytes -= size
        waiter = self._stored_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait_stored(self, limit: int) -> None:
        """Until fewer than `limit` bytes of this connection's sends wait to be stored."""
        while self.unstored_bytes >= limit:
            self._stored_waiter = asyncio.get_running_loop().create_future()
            await self._stored_waiter

    def _receipt(self, producer_id: int, sequence_id: int, highest: int, ledger: int, entry: int,
                 partition: int) -> None:
        answer = BaseCommand(type=BaseCommand.SEND_RECEIPT)
        receipt = answer.send_receipt
        receipt.producer_id = producer_id
        receipt.sequence_id = sequence_id
        receipt.highest_sequence_id = highest
        receipt.message_id.ledgerId = ledger
        receipt.message_id.entryId = entry
        self._write(encode_command(answer))

    def _send_error(self, producer_id: int, sequence_id: int, error: BaseException | None, *,
                    code: int | None = None, message: str = "") -> None:
        answer = BaseCommand(type=BaseCommand.SEND_ERROR)
        answer.send_error.producer_id = producer_id
        answer.send_error.sequence_id = sequence_id
        answer.send_error.error = code if code is not None else server_error(error) if error else UnknownError
        answer.send_error.message = message or str(error)
        self._write(encode_command(answer))

    # --- consumers --------------------------------------------------------------------------------

    async def _subscribe(self, command: BaseCommand) -> None:
        ask = command.subscribe
        if ask.consumer_id in self.consumers:
            raise RequestFailed(ConsumerBusy, f"consumer id {ask.consumer_id} is in use on this connection")
        topic = await self._open_topic(ask.topic)
        subscription_type = SUBSCRIPTION_TYPES[ask.subType]
        start = None
        if not ask.durable and ask.HasField("start_message_id"):       # a reader
            start = _start_offset(ask.start_message_id)
        name = ask.subscription
        subscription = await self.port.subscribe(
            topic.name, topic.index, name, subscription_type,
            from_earliest=ask.initialPosition == CommandSubscribe.Earliest, start_offset=start)
        consumer = PulsarConsumer(ask.consumer_id, topic.name, topic.index, name, subscription,
                                  self._write, self._writable, self._flush, priority=-ask.priority_level)
        try:
            subscription.add_consumer(consumer)
        except ExclusiveUse as exc:
            await self.port.release(topic.name, topic.index, name)
            raise RequestFailed(ConsumerBusy, str(exc)) from None
        consumer.durable = ask.durable
        consumer.on_closed = self._closed_consumer
        self.consumers[ask.consumer_id] = consumer
        self._success(ask.request_id)

    async def _open_topic(self, text: str) -> PulsarTopic:
        topic = parse_topic(text)
        count = await self.port.ensure_topic(topic.name)
        if topic.index >= count:
            raise RequestFailed(TopicNotFound, f"{topic.name} has {count} partition(s), no partition {topic.index}")
        return topic

    def _closed_consumer(self, consumer: PulsarConsumer) -> None:
        if self.consumers.get(consumer.consumer_id) is consumer:
            del self.consumers[consumer.consumer_id]

    def _consumer(self, consumer_id: int) -> PulsarConsumer | None:
        return self.consumers.get(consumer_id)

    async def _flow(self, command: BaseCommand) -> None:
        consumer = self._consumer(command.flow.consumer_id)
        if consumer is not None:
            consumer.grant(command.flow.messagePermits)

    async def _ack(self, command: BaseCommand) -> None:
        ask = command.ack
        consumer = self._consumer(ask.consumer_id)
        if consumer is not None and ask.message_id:
            if ask.ack_type == ask.Cumulative:
                consumer.ack_up_to(offset_of(ask.message_id[-1]))
            else:
                consumer.ack([offset_of(message_id) for message_id in ask.message_id])
        if ask.HasField("request_id"):
            answer = BaseCommand(type=BaseCommand.ACK_RESPONSE)
            answer.ackResponse.consumer_id = ask.consumer_id
            answer.ackResponse.request_id = ask.request_id
            if consumer is None:
                answer.ackResponse.error = ConsumerNotFound
                answer.ackResponse.message = f"no consumer {ask.consumer_id}"
            self._write(encode_command(answer))

    async def _redeliver(self, command: BaseCommand) -> None:
        ask = command.redeliverUnacknowledgedMessages
        consumer = self._consumer(ask.consumer_id)
        if consumer is not None:
            consumer.redeliver([offset_of(m) for m in ask.message_ids] if ask.message_ids else None)

    async def _close_consumer(self, command: BaseCommand) -> None:
        ask = command.close_consumer
        consumer = self.consumers.pop(ask.consumer_id, None)
        if consumer is not None:
            await self._drop_consumer(consumer)
        self._success(ask.request_id)

    async def _drop_consumer(self, consumer: PulsarConsumer) -> None:
        consumer.closed = True
        consumer.subscription.remove_consumer(consumer)
        if consumer.durable:
            await self.port.release(consumer.topic, consumer.index, consumer.subscription_name)
        elif not consumer.subscription.consumers:     # a reader's subscription ends with it
            await self.port.unsubscribe(consumer.topic, consumer.index, consumer.subscription_name)

    async def _unsubscribe(self, command: BaseCommand) -> None:
        ask = command.unsubscribe
        consumer = self._consumer(ask.consumer_id)
        if consumer is None:
            raise RequestFailed(ConsumerNotFound, f"no consumer {ask.consumer_id}")
        others = [c for c in consumer.subscription.consumers if c is not consumer]
        if others and not ask.force:
            raise RequestFailed(ConsumerBusy, "the subscription has other consumers")
        del self.consumers[ask.consumer_id]
        consumer.closed = True
        consumer.subscription.remove_consumer(consumer)
        for other in others:
            other.queue_deleted()
        await self.port.unsubscribe(consumer.topic, consumer.index, consumer.subscription_name)
        self._success(ask.request_id)

    async def _seek(self, command: BaseCommand) -> None:
        ask = command.seek
        consumer = self._consumer(ask.consumer_id)
        if consumer is None:
            raise RequestFailed(ConsumerNotFound, f"no consumer {ask.consumer_id}")
        if ask.HasField("message_id"):
            offset = _start_offset(ask.message_id)
        elif ask.HasField("message_publish_time"):
            offset = await self.port.offset_for_time(consumer.topic, consumer.index, ask.message_publish_time)
        else:
            raise RequestFailed(NotAllowedError, "SEEK names neither a message id nor a time")
        # As a Pulsar broker: the subscription's consumers are closed, and their clients subscribe again.
        for taken_off in await self.port.seek(consumer.topic, consumer.index, consumer.subscription_name, offset):
            taken_off.queue_deleted()
        self._success(ask.request_id)

    async def _last_message_id(self, command: BaseCommand) -> None:
        ask = command.getLastMessageId
        consumer = self._consumer(ask.consumer_id)
        if consumer is None:
            raise RequestFailed(ConsumerNotFound, f"no consumer {ask.consumer_id}")
        _, high_watermark = await self.port.ends(consumer.topic, consumer.index)
        answer = BaseCommand(type=BaseCommand.GET_LAST_MESSAGE_ID_RESPONSE)
        answer.getLastMessageIdResponse.request_id = ask.request_id
        last = answer.getLastMessageIdResponse.last_message_id
        last.ledgerId = LEDGER
        last.entryId = high_watermark - 1 if high_watermark else NO_ID
        mark = answer.getLastMessageIdResponse.consumer_mark_delete_position
        committed = consumer.subscription.cursor.committed_offset
        mark.ledgerId = LEDGER
        mark.entryId = committed - 1 if committed else NO_ID
        self._write(encode_command(answer))

    async def _consumer_stats(self, command: BaseCommand) -> None:
        ask = command.consumerStats
        consumer = self._consumer(ask.consumer_id)
        answer = BaseCommand(type=BaseCommand.CONSUMER_STATS_RESPONSE)
        stats = answer.consumerStatsResponse
        stats.request_id = ask.request_id
        if consumer is None:
            stats.error_code = ConsumerNotFound
            stats.error_message = f"no consumer {ask.consumer_id}"
        else:
            stats.availablePermits = consumer.permits
            stats.unackedMessages = len(consumer.outstanding)
            stats.type = consumer.subscription.subscription_type
            stats.msgBacklog = consumer.subscription.ready_count
        self._write(encode_command(answer))

    # --- the end ---------------------------------------------------------------------------------

    async def close(self) -> None:
        """The connection is gone: its producers end, its consumers' messages go back to their subscriptions."""
        for producer in self.producers.values():
            self._forget_producer(producer)
        self.producers.clear()
        consumers, self.consumers = list(self.consumers.values()), {}
        for consumer in consumers:
            await self._drop_consumer(consumer)


def _start_offset(message_id: MessageIdData) -> int:
    if message_id.entryId >= 1 << 63:      # Pulsar's earliest (-1, -1)
        return 0
    if message_id.ledgerId >= 1 << 63 or message_id.entryId >= 1 << 62:     # latest
        return 1 << 62
    return offset_of(message_id)


def _url(address: str) -> str:
    return f"pulsar://{address}"


def _future(awaitable) -> asyncio.Future:
    return asyncio.ensure_future(awaitable)


def _request_id(command: BaseCommand) -> int | None:
    field = command.ListFields()
    for descriptor, value in field:
        if descriptor.name != "type" and hasattr(value, "request_id"):
            return value.request_id
    return None


_HANDLERS = {
    BaseCommand.PING: Session._ping,
    BaseCommand.PONG: Session._pong,
    BaseCommand.PARTITIONED_METADATA: Session._partitioned_metadata,
    BaseCommand.LOOKUP: Session._lookup,
    BaseCommand.GET_TOPICS_OF_NAMESPACE: Session._topics_of_namespace,
    BaseCommand.GET_SCHEMA: Session._get_schema,
    BaseCommand.GET_OR_CREATE_SCHEMA: Session._get_or_create_schema,
    BaseCommand.PRODUCER: Session._producer,
    BaseCommand.CLOSE_PRODUCER: Session._close_producer,
    BaseCommand.SUBSCRIBE: Session._subscribe,
    BaseCommand.FLOW: Session._flow,
    BaseCommand.ACK: Session._ack,
    BaseCommand.REDELIVER_UNACKNOWLEDGED_MESSAGES: Session._redeliver,
    BaseCommand.CLOSE_CONSUMER: Session._close_consumer,
    BaseCommand.UNSUBSCRIBE: Session._unsubscribe,
    BaseCommand.GET_LAST_MESSAGE_ID: Session._last_message_id,
    BaseCommand.SEEK: Session._seek,
    BaseCommand.CONSUMER_STATS: Session._consumer_stats,
}

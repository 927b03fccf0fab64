"""basic.qos / consume / cancel / publish / get / ack / nack / reject / recover.

- qos: prefetch_count with global=false applies to consumers created afterwards on the channel (one
  limit each); global=true is one limit shared by the channel's deliveries, as RabbitMQ 3.x has it.
  A prefetch_size is NOT_IMPLEMENTED (RabbitMQ does not implement it either).
- consume: a consumer tag reused on the channel is NOT_ALLOWED (closes the connection); exclusive
  is ACCESS_REFUSED while the queue has other consumers. The x-priority argument (an integer, else
  PRECONDITION_FAILED) makes a consumer served before those of lower priority while it has room;
  other consumer arguments and no-local are ignored, as RabbitMQ does.
- publish: unknown exchange NOT_FOUND, internal exchange ACCESS_REFUSED; mandatory and unroutable
  -> basic.return 312 NO_ROUTE; immediate=true is NOT_IMPLEMENTED (as RabbitMQ since 3.0); a
  user_id property other than the logged-in user is PRECONDITION_FAILED, and so is an expiration
  property that is not a non-negative integer (protocols/amqp/records.py). A publish a full
  reject-publish queue refuses is a basic.nack under confirms. Properties stay raw
  unless a headers exchange or a user_id needs them. A publish to an x-delayed-message exchange
  with an x-delay is held by the core (protocols/amqp/delayed.py).
- ack / nack / reject: an unknown delivery tag is PRECONDITION_FAILED; tag 0 with multiple means
  everything outstanding; requeued messages are redelivered first with redelivered=true.
- In tx mode (handlers/tx.py) publishes and ack / nack / reject are held until tx.commit.
- recover (and recover-async) with requeue=true requeues everything unacknowledged on the
  channel; requeue=false is NOT_IMPLEMENTED, as in RabbitMQ.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any

from core.errors import UnknownExchange
from core.queues.policy import field_type
from core.queues.queue import Queue
from core.queues.service import publish as publish_to
from protocols.amqp.channel import Channel, ChannelConsumer, generated_name
from protocols.amqp.codec.properties import ContentProperties
from protocols.amqp.delayed import hold_if_delayed
from protocols.amqp.handlers.queue import queue_name
from protocols.amqp.machine.errors import AmqpConnectionError, ChannelError
from protocols.amqp.machine.events import ContentReceived
from protocols.amqp.records import to_record
from protocols.amqp.spec import ReplyCode

CONSUMER_TAG_PREFIX = "amq.ctag-"
DEFAULT_EXCHANGE_ALIAS = "amq.default"     # RabbitMQ's other name for the default exchange
_USER_ID_FLAG = 0x10     # user-id is the 12th basic property: bit 4 of the first flags short (its low byte)
_EXPIRATION_FLAG = 0x01  # expiration is the 8th: bit 8 of the first flags short (bit 0 of its high byte)


def qos(channel: Channel, args: Mapping[str, Any]) -> None:
    if args["prefetch_size"]:
        raise AmqpConnectionError(ReplyCode.NOT_IMPLEMENTED, f"prefetch_size!=0 ({args['prefetch_size']})",
                                  method_name="basic.qos")
    if args["global"]:
        channel.channel_prefetch = args["prefetch_count"]
        channel.wake_consumers()
    else:
        channel.consumer_prefetch = args["prefetch_count"]
    channel.send("basic.qos-ok")


async def consume(channel: Channel, args: Mapping[str, Any]) -> None:
    session = channel.session
    name = queue_name(channel, args["queue"], "basic.consume")
    session.access.read_queue(name)
    queue = session.space.queue(name, session.owner)
    tag = args["consumer_tag"] or generated_name(CONSUMER_TAG_PREFIX)
    if tag in channel.consumers:
        raise AmqpConnectionError(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'",
                                  method_name="basic.consume")
    priority = consumer_priority(args["arguments"], name, session.vhost)
    consumer = ChannelConsumer(tag, queue, channel, channel.consumer_prefetch, args["no_ack"], priority)
    if not queue.served_here:
        # Added (and checked) at the broker serving the queue first; its deliveries come with a
        # later request, after consume-ok.
        await queue.add_consumer(consumer, exclusive=args["exclusive"])
        if channel.closed or queue.deleted:
            queue.subscription.remove_consumer(consumer)
            return
        channel.consumers[tag] = consumer
        if not args["nowait"]:
            channel.send("basic.consume-ok", consumer_tag=tag)
        return
    subscription = await queue.open()
    subscription.check_consumer(exclusive=args["exclusive"])
    if channel.closed or queue.deleted:
        return
    channel.consumers[tag] = consumer
    if not args["nowait"]:
        channel.send("basic.consume-ok", consumer_tag=tag)
    await queue.add_consumer(consumer, exclusive=args["exclusive"])   # delivers at once: after consume-ok


def consumer_priority(arguments: Mapping[str, Any], queue: str, vhost: str) -> int:
    """basic.consume's x-priority (default 0), refused as RabbitMQ words it when not an integer."""
    value = arguments.get("x-priority", 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ChannelError(ReplyCode.PRECONDITION_FAILED, f"invalid arg 'x-priority' for queue '{queue}' in vhost "
                           f"'{vhost}': \"expected integer, got {field_type(value)}\"", method_name="basic.consume")
    return int(value)


async def cancel(channel: Channel, args: Mapping[str, Any]) -> None:
    tag = args["consumer_tag"]
    consumer = channel.consumers.get(tag)
    if consumer is not None:
        queue = channel.cancel(consumer)
        await channel.session.space.consumer_removed(queue)
    if not args["nowait"]:
        channel.send("basic.cancel-ok", consumer_tag=tag)


def publish(channel: Channel, event: ContentReceived) -> Awaitable[None] | None:
    """Synchronous, unless routing needs a look at the store first (the awaitable to wait for)."""
    args = event.args
    session = channel.session
    if args["immediate"]:
        raise AmqpConnectionError(ReplyCode.NOT_IMPLEMENTED, "immediate=true", method_name="basic.publish")
    properties: ContentProperties = event.properties
    raw = properties.raw
    if raw[1] & _USER_ID_FLAG:
        user_id = properties.decoded.user_id
        if user_id is not None and user_id != session.username:
            raise ChannelError(ReplyCode.PRECONDITION_FAILED, f"user_id property set to '{user_id}' but "
                               f"authenticated user was '{session.username}'", method_name="basic.publish")
    exchange, routing_key = args["exchange"], args["routing_key"]
    if exchange == DEFAULT_EXCHANGE_ALIAS:
        exchange = ""
    session.access.write_exchange(exchange)
    if hold_if_delayed(channel, event, exchange, routing_key):
        return None
    space = session.space
    headers, present = (lambda: properties.decoded.headers or {}), (lambda: properties.decoded.present())
    try:
        queues = space.route(exchange, routing_key, headers, present)
    except UnknownExchange:
        if not space.clustered:
            raise
        queues = None
    if queues is None or (not queues and not exchange and space.clustered):
        # Declared through another broker a moment ago? Looked up first; the channel's next methods wait.
        return _publish_after_lookup(channel, event, exchange, routing_key, headers, present)
    _publish_routed(channel, event, exchange, routing_key, queues)
    return None


async def _publish_after_lookup(channel: Channel, event: ContentReceived, exchange: str, routing_key: str,
                                headers, present) -> None:
    space = channel.session.space
    await space.look_up(exchange, routing_key)
    if not hold_if_delayed(channel, event, exchange, routing_key):     # a delayed exchange found now
        _publish_routed(channel, event, exchange, routing_key, space.route(exchange, routing_key, headers, present))


def _publish_routed(channel: Channel, event: ContentReceived, exchange: str, routing_key: str,
                    queues: list[Queue]) -> None:
    args, session, properties = event.args, channel.session, event.properties
    raw = properties.raw
    if channel.tx is not None:      # routed now, stored (or returned) at tx.commit
        if queues:
            channel.tx.publish(queues, to_record(exchange, routing_key, raw, event.body, session.clock.now_ms()))
        elif args["mandatory"]:
            channel.tx.unroutable(properties, event.body, exchange, routing_key)
        return
    if queues:
        record = to_record(exchange, routing_key, raw, event.body, session.clock.now_ms())
        durable = publish_to(queues, record)
        session.published_to(queues, durable)
        if raw[0] & _EXPIRATION_FLAG:
            for queue in queues:
                queue.expect_expiring()
    else:
        durable = []
        if args["mandatory"]:
            session.write(session.machine.send_content(
                channel.number, "basic.return", properties, event.body, reply_code=ReplyCode.NO_ROUTE,
                reply_text="NO_ROUTE", exchange=exchange, routing_key=routing_key))
    channel.published(durable)


async def get(channel: Channel, args: Mapping[str, Any]) -> None:
    session = channel.session
    name = queue_name(channel, args["queue"], "basic.get")
    session.access.read_queue(name)
    queue = session.space.queue(name, session.owner)
    await session.publishes_settled(queue)
    message = await queue.get(channel, auto_ack=args["no_ack"])
    if message is None:
        channel.send("basic.get-empty")
        return
    if not args["no_ack"]:
        channel.held_in.add(queue)    # from here on the channel gives it back if it closes
    channel.send_got(queue, message, auto_ack=args["no_ack"], message_count=await queue.message_count())


def ack(channel: Channel, args: Mapping[str, Any]) -> None:
    if channel.tx is not None:
        channel.tx.settle(channel, args["delivery_tag"], args["multiple"], None)
    else:
        channel.ack(args["delivery_tag"], args["multiple"])


def nack(channel: Channel, args: Mapping[str, Any]) -> None:
    if channel.tx is not None:
        channel.tx.settle(channel, args["delivery_tag"], args["multiple"], args["requeue"])
    else:
        channel.reject(args["delivery_tag"], args["multiple"], args["requeue"])


def reject(channel: Channel, args: Mapping[str, Any]) -> None:
    if channel.tx is not None:
        channel.tx.settle(channel, args["delivery_tag"], False, args["requeue"])
    else:
        channel.reject(args["delivery_tag"], False, args["requeue"])


def _recover(channel: Channel, args: Mapping[str, Any], method_name: str) -> None:
    if not args["requeue"]:
        raise AmqpConnectionError(ReplyCode.NOT_IMPLEMENTED, "requeue=false", method_name=method_name)
    channel.recover()


def recover(channel: Channel, args: Mapping[str, Any]) -> None:
    _recover(channel, args, "basic.recover")
    channel.send("basic.recover-ok")


def recover_async(channel: Channel, args: Mapping[str, Any]) -> None:
    _recover(channel, args, "basic.recover-async")


HANDLERS = {"basic.qos": qos, "basic.consume": consume, "basic.cancel": cancel, "basic.publish": publish,
            "basic.get": get, "basic.ack": ack, "basic.nack": nack, "basic.reject": reject,
            "basic.recover": recover, "basic.recover-async": recover_async}

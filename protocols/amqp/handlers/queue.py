"""queue.declare / bind / unbind / purge / delete.

declare: "" gets a server name ("amq.gen-" and 22 characters); passive on a missing queue is
NOT_FOUND; an exclusive queue of another connection is RESOURCE_LOCKED; a redeclare with other
durable / exclusive / auto-delete or another value of an argument RabbitMQ compares (TTL,
dead-lettering, limits, x-queue-type: core/queues/policy.py) is PRECONDITION_FAILED; an "amq."
name is ACCESS_REFUSED. Exclusive queues belong to the connection and are deleted with it;
auto-delete queues go with their last consumer. Queue arguments the core does not implement yet
(stream queues) are refused with PRECONDITION_FAILED rather than accepted and ignored.

The "" queue name of bind / purge / delete (and basic.consume / basic.get) means the queue this
channel declared last, as in RabbitMQ; with it, an empty routing key means that queue's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.queues.exchange import Binding, DestinationKind
from protocols.amqp.channel import Channel, generated_name
from protocols.amqp.machine.errors import ChannelError
from protocols.amqp.spec import ReplyCode

SERVER_NAMED_PREFIX = "amq.gen-"


def queue_name(channel: Channel, name: str, method_name: str) -> str:
    """The queue a method names, with the "" shortcut for the channel's last declared queue."""
    if name:
        return name
    if not channel.most_recent_queue:
        raise ChannelError(ReplyCode.NOT_FOUND, "no previously declared queue", method_name=method_name)
    return channel.most_recent_queue


async def declare(channel: Channel, args: Mapping[str, Any]) -> None:
    session = channel.session
    name = args["queue"]
    server_named = not name and not args["passive"]
    if server_named:
        name = session.space.local_name(lambda: generated_name(SERVER_NAMED_PREFIX))
    elif not name:
        name = queue_name(channel, name, "queue.declare")
    if not args["passive"]:
        session.access.configure_queue(name)
    queue = await session.space.declare_queue(
        name, durable=args["durable"], exclusive=args["exclusive"], auto_delete=args["auto_delete"],
        arguments=args["arguments"], owner=session.owner, passive=args["passive"], server_named=server_named)
    channel.most_recent_queue = queue.name
    if not args["nowait"]:
        await session.publishes_settled(queue)
        channel.send("queue.declare-ok", queue=queue.name, message_count=await queue.message_count(),
                     consumer_count=queue.consumer_count)


def _binding(channel: Channel, args: Mapping[str, Any], method_name: str) -> Binding:
    name = queue_name(channel, args["queue"], method_name)
    routing_key = args["routing_key"] or ("" if args["queue"] else name)
    access = channel.session.access
    access.write_queue(name)
    access.read_exchange(args["exchange"])
    return Binding(args["exchange"], name, DestinationKind.QUEUE, routing_key, dict(args["arguments"]))


async def bind(channel: Channel, args: Mapping[str, Any]) -> None:
    session = channel.session
    await session.space.bind(_binding(channel, args, "queue.bind"), owner=session.owner)
    if not args["nowait"]:
        channel.send("queue.bind-ok")


async def unbind(channel: Channel, args: Mapping[str, Any]) -> None:
    session = channel.session
    await session.space.unbind(_binding(channel, args, "queue.unbind"), owner=session.owner)
    channel.send("queue.unbind-ok")


async def purge(channel: Channel, args: Mapping[str, Any]) -> None:
    session = channel.session
    name = queue_name(channel, args["queue"], "queue.purge")
    session.access.read_queue(name)
    await session.publishes_settled(session.space.queue(name, session.owner))
    count = await session.space.purge_queue(name, owner=session.owner)
    if not args["nowait"]:
        channel.send("queue.purge-ok", message_count=count)


async def delete(channel: Channel, args: Mapping[str, Any]) -> None:
    session = channel.session
    name = queue_name(channel, args["queue"], "queue.delete")
    session.access.configure_queue(name)
    if name in session.space.queues:
        await session.publishes_settled(session.space.queues[name])
    count = await session.space.delete_queue(name, if_unused=args["if_unused"], if_empty=args["if_empty"],
                                                owner=session.owner)
    if not args["nowait"]:
        channel.send("queue.delete-ok", message_count=count)


HANDLERS = {"queue.declare": declare, "queue.bind": bind, "queue.unbind": unbind, "queue.purge": purge,
            "queue.delete": delete}

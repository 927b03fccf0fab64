"""exchange.declare / delete / bind / unbind.

Types: direct, fanout, topic, headers; any other is COMMAND_INVALID (503, closes the connection),
as RabbitMQ answers a type whose plugin is not enabled (x-delayed-message, x-consistent-hash).
Arguments: alternate-exchange is honoured; others are kept and ignored, as RabbitMQ does.
Deleting an exchange that does not exist succeeds; the predeclared amq.* exchanges and the default
exchange cannot be declared anew, deleted or bound (ACCESS_REFUSED).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.queues.exchange import Binding, DestinationKind, ExchangeType
from protocols.amqp.channel import Channel
from protocols.amqp.machine.errors import AmqpConnectionError
from protocols.amqp.spec import ReplyCode


def exchange_type(name: str) -> ExchangeType:
    try:
        return ExchangeType(name)
    except ValueError:
        raise AmqpConnectionError(ReplyCode.COMMAND_INVALID, f"unknown exchange type '{name}'",
                                  method_name="exchange.declare") from None


async def declare(channel: Channel, args: Mapping[str, Any]) -> None:
    space = channel.connection.space
    if args["passive"]:
        await space.declare_exchange(args["exchange"], ExchangeType.DIRECT, passive=True)
    else:
        await space.declare_exchange(args["exchange"], exchange_type(args["type"]), durable=args["durable"],
                                     auto_delete=args["auto_delete"], internal=args["internal"],
                                     arguments=args["arguments"])
    if not args["nowait"]:
        channel.send("exchange.declare-ok")


async def delete(channel: Channel, args: Mapping[str, Any]) -> None:
    await channel.connection.space.delete_exchange(args["exchange"], if_unused=args["if_unused"])
    if not args["nowait"]:
        channel.send("exchange.delete-ok")


def _binding(args: Mapping[str, Any]) -> Binding:
    return Binding(args["source"], args["destination"], DestinationKind.EXCHANGE, args["routing_key"],
                   dict(args["arguments"]))


async def bind(channel: Channel, args: Mapping[str, Any]) -> None:
    await channel.connection.space.bind(_binding(args))
    if not args["nowait"]:
        channel.send("exchange.bind-ok")


async def unbind(channel: Channel, args: Mapping[str, Any]) -> None:
    await channel.connection.space.unbind(_binding(args))
    if not args["nowait"]:
        channel.send("exchange.unbind-ok")


HANDLERS = {"exchange.declare": declare, "exchange.delete": delete, "exchange.bind": bind,
            "exchange.unbind": unbind}

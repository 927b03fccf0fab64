"""exchange.declare / delete / bind / unbind.

Types: direct, fanout, topic, headers, and the types of two RabbitMQ plugins: x-consistent-hash
and x-delayed-message (core/queues/exchange.py; protocols/amqp/delayed.py for publishing to a
delayed one). Any other is COMMAND_INVALID (503, closes the connection), as RabbitMQ answers an
unknown type; so is an unknown x-delayed-type when a delayed exchange is created (the plugin asks
RabbitMQ to check that type). The plugins' own refusals are PRECONDITION_FAILED (406): a missing
x-delayed-type, a consistent-hash binding key that is not a positive integer, an unsupported
hash-property, both hash-header and hash-property.
Arguments: alternate-exchange is honoured; others are kept and ignored, as RabbitMQ does.
Deleting an exchange that does not exist succeeds; the predeclared amq.* exchanges and the default
exchange cannot be declared anew, deleted or bound (ACCESS_REFUSED).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.queues.exchange import DELAYED_TYPE, Binding, DestinationKind, ExchangeType
from core.queues.service import RESERVED_PREFIX
from protocols.amqp.channel import Channel
from protocols.amqp.machine.errors import AmqpConnectionError
from protocols.amqp.spec import ReplyCode

ALTERNATE_EXCHANGE = "alternate-exchange"


def exchange_type(name: str) -> ExchangeType:
    try:
        return ExchangeType(name)
    except ValueError:
        raise AmqpConnectionError(ReplyCode.COMMAND_INVALID, f"unknown exchange type '{name}'",
                                  method_name="exchange.declare") from None


def _checked_type(space, args: Mapping[str, Any]) -> ExchangeType:
    declared = exchange_type(args["type"])
    if declared is ExchangeType.DELAYED and args["exchange"] not in space.routing.exchanges:
        delayed_type = args["arguments"].get(DELAYED_TYPE)
        if isinstance(delayed_type, str) and delayed_type != ExchangeType.DELAYED:
            exchange_type(delayed_type)
    return declared


async def declare(channel: Channel, args: Mapping[str, Any]) -> None:
    space, access = channel.session.space, channel.session.access
    if args["passive"]:
        await space.declare_exchange(args["exchange"], ExchangeType.DIRECT, passive=True)
    else:
        access.configure_exchange(args["exchange"])
        alternate = args["arguments"].get(ALTERNATE_EXCHANGE)
        if isinstance(alternate, str):    # routing into it on this exchange's behalf
            access.read_exchange(args["exchange"])
            access.write_exchange(alternate)
        await space.declare_exchange(args["exchange"], _checked_type(space, args), durable=args["durable"],
                                     auto_delete=args["auto_delete"], internal=args["internal"],
                                     arguments=args["arguments"])
    if not args["nowait"]:
        channel.send("exchange.declare-ok")


async def delete(channel: Channel, args: Mapping[str, Any]) -> None:
    if args["exchange"] and not args["exchange"].startswith(RESERVED_PREFIX):   # those are refused first
        channel.session.access.configure_exchange(args["exchange"])
    await channel.session.space.delete_exchange(args["exchange"], if_unused=args["if_unused"])
    if not args["nowait"]:
        channel.send("exchange.delete-ok")


def _binding(channel: Channel, args: Mapping[str, Any]) -> Binding:
    access = channel.session.access
    access.write_exchange(args["destination"])
    access.read_exchange(args["source"])
    return Binding(args["source"], args["destination"], DestinationKind.EXCHANGE, args["routing_key"],
                   dict(args["arguments"]))


async def bind(channel: Channel, args: Mapping[str, Any]) -> None:
    await channel.session.space.bind(_binding(channel, args))
    if not args["nowait"]:
        channel.send("exchange.bind-ok")


async def unbind(channel: Channel, args: Mapping[str, Any]) -> None:
    await channel.session.space.unbind(_binding(channel, args))
    if not args["nowait"]:
        channel.send("exchange.unbind-ok")


HANDLERS = {"exchange.declare": declare, "exchange.delete": delete, "exchange.bind": bind,
            "exchange.unbind": unbind}

"""confirm.select: publisher confirms on the channel (acks once the message is durable in every
queue it was routed to; unroutable messages are confirmed at once, after any basic.return). On a
channel in tx mode it is PRECONDITION_FAILED, as in RabbitMQ."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocols.amqp.channel import Channel
from protocols.amqp.machine.errors import ChannelError
from protocols.amqp.spec import ReplyCode


def select(channel: Channel, args: Mapping[str, Any]) -> None:
    if channel.tx is not None:
        raise ChannelError(ReplyCode.PRECONDITION_FAILED, "cannot switch from tx to confirm mode",
                           method_name="confirm.select")
    channel.confirming = True
    if not args["nowait"]:
        channel.send("confirm.select-ok")


HANDLERS = {"confirm.select": select}

"""confirm.select: publisher confirms on the channel (acks once the message is durable in every
queue it was routed to; unroutable messages are confirmed at once, after any basic.return)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocols.amqp.channel import Channel


def select(channel: Channel, args: Mapping[str, Any]) -> None:
    channel.confirming = True
    if not args["nowait"]:
        channel.send("confirm.select-ok")


HANDLERS = {"confirm.select": select}

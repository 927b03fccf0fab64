"""channel.flow and access.request (the tx class: handlers/tx.py).

- channel.flow from the client pauses (active=false) or resumes deliveries on the channel.
- access.request (deprecated) is answered with a ticket, as RabbitMQ does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocols.amqp.channel import Channel


def flow(channel: Channel, args: Mapping[str, Any]) -> None:
    channel.flow_active = args["active"]
    channel.send("channel.flow-ok", active=args["active"])
    if channel.flow_active:
        channel.wake_consumers()


def access_request(channel: Channel, args: Mapping[str, Any]) -> None:
    channel.send("access.request-ok", ticket=1)


HANDLERS = {"channel.flow": flow, "access.request": access_request}

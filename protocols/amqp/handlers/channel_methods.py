"""channel.flow, access.request and the tx class.

- channel.flow from the client pauses (active=false) or resumes deliveries on the channel.
- access.request (deprecated) is answered with a ticket, as RabbitMQ does.
- tx: transactions are not atomic in this gateway yet, so tx.select is refused with
  NOT_IMPLEMENTED (540, closes the connection) rather than answered with an OK that promises
  atomicity; tx.commit / tx.rollback on a channel never selected are PRECONDITION_FAILED, as in
  RabbitMQ.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocols.amqp.channel import Channel
from protocols.amqp.machine.errors import AmqpConnectionError, ChannelError
from protocols.amqp.spec import ReplyCode


def flow(channel: Channel, args: Mapping[str, Any]) -> None:
    channel.flow_active = args["active"]
    channel.send("channel.flow-ok", active=args["active"])
    if channel.flow_active:
        channel.wake_consumers()


def access_request(channel: Channel, args: Mapping[str, Any]) -> None:
    channel.send("access.request-ok", ticket=1)


def tx_select(channel: Channel, args: Mapping[str, Any]) -> None:
    raise AmqpConnectionError(ReplyCode.NOT_IMPLEMENTED, "transactions (tx.select) are not implemented: "
                              "commits would not be atomic", method_name="tx.select")


def tx_not_selected(method_name: str):
    def handler(channel: Channel, args: Mapping[str, Any]) -> None:
        raise ChannelError(ReplyCode.PRECONDITION_FAILED, "channel is not transactional", method_name=method_name)
    return handler


HANDLERS = {"channel.flow": flow, "access.request": access_request, "tx.select": tx_select,
            "tx.commit": tx_not_selected("tx.commit"), "tx.rollback": tx_not_selected("tx.rollback")}

"""tx.select / tx.commit / tx.rollback (the transaction itself: protocols/amqp/tx.py).

As RabbitMQ: tx.commit / tx.rollback on a channel never selected are PRECONDITION_FAILED "channel
is not transactional"; tx.select on a channel in confirm mode, and confirm.select on one in tx
mode, are PRECONDITION_FAILED. tx.select on a channel already transactional is answered again.
A commit whose appends fail is INTERNAL_ERROR (the connection closes; see tx.py for what then
may have been stored).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from core.errors import CoreError
from protocols.amqp.channel import Channel
from protocols.amqp.machine.errors import AmqpConnectionError, ChannelError
from protocols.amqp.spec import ReplyCode
from protocols.amqp.tx import Transaction

log = logging.getLogger("gateway.amqp")


def select(channel: Channel, args: Mapping[str, Any]) -> None:
    if channel.confirming:
        raise ChannelError(ReplyCode.PRECONDITION_FAILED, "cannot switch from confirm to tx mode",
                           method_name="tx.select")
    if channel.tx is None:
        channel.tx = Transaction()
    channel.send("tx.select-ok")


def _transaction(channel: Channel, method_name: str) -> Transaction:
    if channel.tx is None:
        raise ChannelError(ReplyCode.PRECONDITION_FAILED, "channel is not transactional", method_name=method_name)
    return channel.tx


async def commit(channel: Channel, args: Mapping[str, Any]) -> None:
    transaction = _transaction(channel, "tx.commit")
    try:
        await transaction.commit(channel)
    except (CoreError, ChannelError, AmqpConnectionError):
        raise
    except Exception as exc:
        log.warning("tx.commit on channel %d failed: %r", channel.number, exc)
        raise AmqpConnectionError(ReplyCode.INTERNAL_ERROR, f"tx.commit failed: {exc}",
                                  method_name="tx.commit") from None
    if not channel.closed:
        channel.send("tx.commit-ok")


def rollback(channel: Channel, args: Mapping[str, Any]) -> None:
    _transaction(channel, "tx.rollback").rollback(channel)
    channel.send("tx.rollback-ok")


HANDLERS = {"tx.select": select, "tx.commit": commit, "tx.rollback": rollback}

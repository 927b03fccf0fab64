"""Core errors as the AMQP exceptions RabbitMQ would raise for the same situation.

Soft codes (403, 404, 405, 406) close the channel; anything the table does not know is an
INTERNAL_ERROR (541), which closes the connection. Core messages name the object ("no queue 'q'");
the vhost is added after the first queue or exchange name, as RabbitMQ words it
("NOT_FOUND - no queue 'q' in vhost '/'").
"""

from __future__ import annotations

import re

from core import errors as core
from protocols.amqp.machine.errors import AmqpError, amqp_error
from protocols.amqp.spec import ReplyCode

CORE_TO_AMQP: dict[type[core.CoreError], ReplyCode] = {
    core.UnknownQueue: ReplyCode.NOT_FOUND,
    core.UnknownExchange: ReplyCode.NOT_FOUND,
    core.UnknownTopic: ReplyCode.NOT_FOUND,
    core.InequivalentDeclaration: ReplyCode.PRECONDITION_FAILED,
    core.ResourceLocked: ReplyCode.RESOURCE_LOCKED,
    core.ExclusiveUse: ReplyCode.ACCESS_REFUSED,
    core.ResourceInUse: ReplyCode.PRECONDITION_FAILED,
    core.ReservedName: ReplyCode.ACCESS_REFUSED,
    core.NotPermitted: ReplyCode.ACCESS_REFUSED,
    core.InvalidArgument: ReplyCode.PRECONDITION_FAILED,
    core.InvalidName: ReplyCode.PRECONDITION_FAILED,
    core.RecordTooLarge: ReplyCode.PRECONDITION_FAILED,
    # Another broker of the cluster owns the queue: close the connection, naming that broker, so the
    # client reconnects there (AMQP 0.9.1 has no redirect).
    core.NotOwner: ReplyCode.CONNECTION_FORCED,
}

_NAMED = re.compile(r"((?:queue|exchange) '[^']*')")


def amqp_code(exc: core.CoreError) -> ReplyCode:
    for cls in type(exc).__mro__:
        code = CORE_TO_AMQP.get(cls)
        if code is not None:
            return code
    return ReplyCode.INTERNAL_ERROR


def from_core(exc: core.CoreError, vhost: str, class_id: int = 0, method_id: int = 0) -> AmqpError:
    code = amqp_code(exc)
    text = _NAMED.sub(lambda m: f"{m.group(1)} in vhost '{vhost}'", str(exc), count=1)
    return amqp_error(code, text, class_id, method_id)

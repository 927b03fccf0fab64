"""The queue arguments the core acts on (TTL, expiry, dead-lettering, length and delivery limits),
validated and checked for equivalence as RabbitMQ does.

`QueuePolicy.of(name, arguments, ...)` raises InvalidArgument with RabbitMQ's text for a bad value
("invalid arg 'x-message-ttl' for queue 'q': {value_negative,-1}"); the protocol adds the vhost.

    x-message-ttl            int >= 0 (ms)     messages older than this expire
    x-expires                int > 0 (ms)      the queue is deleted after being unused this long
    x-dead-letter-exchange   str               where dead messages are republished ("" the default exchange)
    x-dead-letter-routing-key str              their routing key (default: their own); needs an exchange
    x-max-length             int >= 0          ready messages kept at most
    x-max-length-bytes       int >= 0          ready message bodies kept at most, in bytes
    x-overflow               drop-head | reject-publish | reject-publish-dlx
    x-queue-type             classic | quorum  quorum: durable only, never exclusive or auto-delete
    x-delivery-limit         int (quorum only) deliveries before a returned message is dead-lettered;
                                               20 when absent (RabbitMQ 4), < 0 unlimited
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import InequivalentDeclaration, InvalidArgument

CLASSIC, QUORUM = "classic", "quorum"
QUEUE_TYPES = (CLASSIC, QUORUM)
DROP_HEAD, REJECT_PUBLISH, REJECT_PUBLISH_DLX = "drop-head", "reject-publish", "reject-publish-dlx"
OVERFLOW_MODES = (DROP_HEAD, REJECT_PUBLISH, REJECT_PUBLISH_DLX)
DEFAULT_QUORUM_DELIVERY_LIMIT = 20

MESSAGE_TTL = "x-message-ttl"
EXPIRES = "x-expires"
DEAD_LETTER_EXCHANGE = "x-dead-letter-exchange"
DEAD_LETTER_ROUTING_KEY = "x-dead-letter-routing-key"
MAX_LENGTH = "x-max-length"
MAX_LENGTH_BYTES = "x-max-length-bytes"
OVERFLOW = "x-overflow"
QUEUE_TYPE = "x-queue-type"
DELIVERY_LIMIT = "x-delivery-limit"

# Arguments a queue of each type takes, and whose value must match on a redeclare (RabbitMQ checks
# a queue type's own arguments for equivalence).
_COMMON = (EXPIRES, MESSAGE_TTL, DEAD_LETTER_EXCHANGE, DEAD_LETTER_ROUTING_KEY, MAX_LENGTH, MAX_LENGTH_BYTES,
           OVERFLOW, QUEUE_TYPE)
EQUIVALENT_ARGUMENTS = {CLASSIC: _COMMON + ("x-queue-mode",), QUORUM: _COMMON + (DELIVERY_LIMIT,)}
# Arguments only one queue type takes (as RabbitMQ 3.10+: a classic queue refuses x-delivery-limit,
# a quorum queue x-max-priority).
_TYPE_ONLY = {DELIVERY_LIMIT: QUORUM, "x-max-priority": CLASSIC}


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    queue_type: str = CLASSIC
    message_ttl_ms: int | None = None
    expires_ms: int | None = None
    dead_letter_exchange: str | None = None     # None: dead messages are dropped
    dead_letter_routing_key: str | None = None
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = DROP_HEAD
    delivery_limit: int | None = None           # None: unlimited

    @property
    def limits_length(self) -> bool:
        return self.max_length is not None or self.max_length_bytes is not None

    @classmethod
    def of(cls, name: str, arguments: Mapping[str, Any], *, durable: bool = True, exclusive: bool = False,
           auto_delete: bool = False) -> "QueuePolicy":
        queue_type = arguments.get(QUEUE_TYPE, CLASSIC)
        if queue_type not in QUEUE_TYPES:
            raise _invalid(name, QUEUE_TYPE, f'"unsupported queue type \'{_shown(queue_type)}\'"')
        if queue_type == QUORUM:
            for refused, flag in (("non-durable", not durable), ("exclusive-owner", exclusive),
                                  ("auto-delete", auto_delete)):
                if flag:
                    raise InvalidArgument(f"invalid property '{refused}' for queue '{name}'")
        for arg, only in _TYPE_ONLY.items():
            if arg in arguments and queue_type != only:
                raise InvalidArgument(f"invalid arg '{arg}' for queue '{name}' of queue type "
                                      f"rabbit_{queue_type}_queue")
        dlx = arguments.get(DEAD_LETTER_EXCHANGE)
        if dlx is not None and not isinstance(dlx, str):
            raise InvalidArgument(f"invalid type '{field_type(dlx)}' for arg '{DEAD_LETTER_EXCHANGE}' "
                                  f"in queue '{name}'")
        dlrk = arguments.get(DEAD_LETTER_ROUTING_KEY)
        if dlrk is not None:
            if not isinstance(dlrk, str):
                raise InvalidArgument(f"invalid type '{field_type(dlrk)}' for arg '{DEAD_LETTER_ROUTING_KEY}' "
                                      f"in queue '{name}'")
            if dlx is None:
                raise _invalid(name, DEAD_LETTER_ROUTING_KEY, "routing_key_but_no_dlx_defined")
        overflow = arguments.get(OVERFLOW, DROP_HEAD)
        if overflow not in OVERFLOW_MODES:
            raise _invalid(name, OVERFLOW, "invalid_overflow")
        delivery_limit = _integer(name, arguments, DELIVERY_LIMIT, minimum=None)
        if queue_type == QUORUM and delivery_limit is None:
            delivery_limit = DEFAULT_QUORUM_DELIVERY_LIMIT
        return cls(queue_type=queue_type,
                   message_ttl_ms=_integer(name, arguments, MESSAGE_TTL, minimum=0),
                   expires_ms=_integer(name, arguments, EXPIRES, minimum=1),
                   dead_letter_exchange=dlx, dead_letter_routing_key=dlrk,
                   max_length=_integer(name, arguments, MAX_LENGTH, minimum=0),
                   max_length_bytes=_integer(name, arguments, MAX_LENGTH_BYTES, minimum=0),
                   overflow=overflow,
                   delivery_limit=delivery_limit if delivery_limit is not None and delivery_limit >= 0 else None)


def check_equivalence(name: str, current: Mapping[str, Any], received: Mapping[str, Any]) -> None:
    """InequivalentDeclaration when a redeclare changes an argument RabbitMQ compares."""
    queue_type = current.get(QUEUE_TYPE, CLASSIC)
    for arg in EQUIVALENT_ARGUMENTS.get(queue_type, ()):
        old, new = current.get(arg), received.get(arg)
        if arg == QUEUE_TYPE and {old, new} <= {None, CLASSIC}:
            continue
        if old == new and isinstance(old, bool) == isinstance(new, bool):
            continue
        if old is not None and new is not None:
            raise InequivalentDeclaration(f"inequivalent arg '{arg}' for queue '{name}': received "
                                          f"'{_shown(new)}' but current is '{_shown(old)}'")
        raise InequivalentDeclaration(f"inequivalent arg '{arg}' for queue '{name}': received "
                                      f"{_described(new)} but current is {_described(old)}")


# Values a protocol decoded keep their wire type in a subclass named after it (int8 ... int64, float,
# byte array); plain values are named by the type an encoder would give them.
_WIRE_TYPES = {"Int8": "byte", "UInt8": "unsignedbyte", "Int16": "short", "UInt16": "unsignedshort",
               "Int32": "signedint", "UInt32": "unsignedint", "Int64": "long", "Float32": "float",
               "ByteArray": "binary"}


def field_type(value: Any) -> str:
    """RabbitMQ's name for the AMQP field type a value travels as."""
    wire = _WIRE_TYPES.get(type(value).__name__)
    if wire is not None:
        return wire
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -2**31 <= value < 2**31 else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, (str, bytes)):
        return "longstr"
    if isinstance(value, decimal.Decimal):
        return "decimal"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, Mapping):
        return "table"
    if isinstance(value, (list, tuple)):
        return "array"
    return "void"


def _integer(name: str, arguments: Mapping[str, Any], arg: str, *, minimum: int | None) -> int | None:
    value = arguments.get(arg)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        if arg == DELIVERY_LIMIT:
            raise InvalidArgument(f"invalid arg '{arg}' for queue '{name}' of queue type rabbit_quorum_queue")
        raise _invalid(name, arg, f'"expected integer, got {field_type(value)}"')
    value = int(value)
    if minimum is not None and value < minimum:
        raise _invalid(name, arg, f"{{value_zero,{value}}}" if value == 0 else f"{{value_negative,{value}}}")
    return value


def _invalid(name: str, arg: str, reason: str) -> InvalidArgument:
    return InvalidArgument(f"invalid arg '{arg}' for queue '{name}': {reason}")


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return str(float(value))
    return str(value)


def _described(value: Any) -> str:
    return "none" if value is None else f"the value '{_shown(value)}' of type '{field_type(value)}'"

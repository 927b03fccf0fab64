"""A queue's arguments, parsed once: what the core acts on, validated and checked for equivalence
as RabbitMQ does.

`QueuePolicy.of(name, arguments, ...)` is the one parse (a declare, a queue loaded after a restart);
it raises InvalidArgument with RabbitMQ's text for a bad value ("invalid arg 'x-message-ttl' for
queue 'q': {value_negative,-1}"), the queue named as its Resource, which a protocol words its way
(AMQP adds the vhost). `check_equivalent(...)` is the one
comparison of a redeclare with the queue as it is.

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
    x-max-priority           int 0..255        (classic only) a priority queue (core/queues/priority.py)
    x-single-active-consumer bool              only the earliest registered consumer still there
                                               receives; the others wait in order (= failover)
    x-subscription-type      shared | exclusive | failover | key-shared
                                               how the queue's consumers share it (default shared);
                                               exclusive: one consumer at a time, others refused;
                                               failover: x-single-active-consumer; key-shared: FIFO
                                               message groups (core/queues/groups.py)
    x-group-poison-policy    block | skip      (key-shared only) a message over the delivery limit
                                               parks its group (block, the default) or the group
                                               moves on (skip); dead-lettered either way
    x-delivery-limit         int               also taken by a classic key-shared queue
    x-queue-mode             default | lazy    accepted (every queue is on disk), compared on redeclare
    x-consumer-timeout       int >= 0 (ms)     a delivery unacknowledged longer than this closes the
                                               channel holding it (core/queues/ack_timeout.py); the
                                               broker's default when absent. Compared on redeclare of
                                               a quorum queue only, as RabbitMQ does
    x-requeue-delay          int >= 0 (ms)     a message nacked or rejected with requeue=true goes back
                                               to the tail of the queue this much later (held by
                                               core/delayed, so it survives a restart); 0: at once;
                                               not on key-shared queues (it would reorder a group)

Refused as not implemented (never silently ignored): UNSUPPORTED_ARGUMENTS. Other arguments are
kept and ignored, as RabbitMQ does.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import RESOURCE, CoreError, InequivalentDeclaration, InvalidArgument, Resource
from core.queues.groups import BLOCK, POISON_POLICIES

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
MAX_PRIORITY = "x-max-priority"
SINGLE_ACTIVE = "x-single-active-consumer"
QUEUE_MODE = "x-queue-mode"
REQUEUE_DELAY = "x-requeue-delay"
SUBSCRIPTION_TYPE = "x-subscription-type"
GROUP_POISON_POLICY = "x-group-poison-policy"
CONSUMER_TIMEOUT = "x-consumer-timeout"
SHARED, EXCLUSIVE, FAILOVER, KEY_SHARED = "shared", "exclusive", "failover", "key-shared"
SUBSCRIPTION_TYPES = (SHARED, EXCLUSIVE, FAILOVER, KEY_SHARED)
MAX_SUPPORTED_PRIORITY = 255       # RabbitMQ's limit
QUEUE_MODES = ("default", "lazy")
UNSUPPORTED_ARGUMENTS = frozenset({
    "x-max-age", "x-stream-max-segment-size-bytes", "x-queue-leader-locator", "x-queue-master-locator",
})

# Arguments a queue of each type takes, and whose value must match on a redeclare (RabbitMQ checks
# a queue type's own arguments for equivalence).
_COMMON = (EXPIRES, MESSAGE_TTL, DEAD_LETTER_EXCHANGE, DEAD_LETTER_ROUTING_KEY, MAX_LENGTH, MAX_LENGTH_BYTES,
           OVERFLOW, QUEUE_TYPE)
EQUIVALENT_ARGUMENTS = {CLASSIC: _COMMON + (QUEUE_MODE,), QUORUM: _COMMON + (DELIVERY_LIMIT, CONSUMER_TIMEOUT)}
# ... and those compared whatever the type.
_ALWAYS_EQUIVALENT = (QUEUE_MODE, MAX_PRIORITY, SINGLE_ACTIVE, SUBSCRIPTION_TYPE, GROUP_POISON_POLICY, REQUEUE_DELAY)
# Arguments only one queue type takes (as RabbitMQ 3.10+: a classic queue refuses x-delivery-limit,
# a quorum queue x-max-priority).
_TYPE_ONLY = {DELIVERY_LIMIT: QUORUM, MAX_PRIORITY: CLASSIC}


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
    max_priority: int = 0                       # 0: not a priority queue
    subscription_type: str = SHARED
    group_poison_policy: str = BLOCK            # key-shared: what a poison message does to its group
    consumer_timeout_ms: int | None = None      # None: the broker's default acknowledgement timeout
    requeue_delay_ms: int = 0                   # > 0: a requeued message returns to the tail this much later

    @property
    def single_active(self) -> bool:
        return self.subscription_type == FAILOVER

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
                    raise InvalidArgument.about(Resource.queue(name), f"invalid property '{refused}' for {RESOURCE}")
        subscription_type = subscription_type_of(name, arguments)
        for arg, only in _TYPE_ONLY.items():
            if arg in arguments and queue_type != only and not (arg == DELIVERY_LIMIT and subscription_type == KEY_SHARED):
                raise InvalidArgument.about(Resource.queue(name), f"invalid arg '{arg}' for {RESOURCE} of queue type "
                                                                  f"rabbit_{queue_type}_queue")
        dlx = arguments.get(DEAD_LETTER_EXCHANGE)
        if dlx is not None and not isinstance(dlx, str):
            raise InvalidArgument.about(Resource.queue(name), f"invalid type '{field_type(dlx)}' for arg "
                                                              f"'{DEAD_LETTER_EXCHANGE}' in {RESOURCE}")
        dlrk = arguments.get(DEAD_LETTER_ROUTING_KEY)
        if dlrk is not None:
            if not isinstance(dlrk, str):
                raise InvalidArgument.about(Resource.queue(name), f"invalid type '{field_type(dlrk)}' for arg "
                                                                  f"'{DEAD_LETTER_ROUTING_KEY}' in {RESOURCE}")
            if dlx is None:
                raise _invalid(name, DEAD_LETTER_ROUTING_KEY, "routing_key_but_no_dlx_defined")
        overflow = arguments.get(OVERFLOW, DROP_HEAD)
        if overflow not in OVERFLOW_MODES:
            raise _invalid(name, OVERFLOW, "invalid_overflow")
        delivery_limit = _integer(name, arguments, DELIVERY_LIMIT, minimum=None)
        if queue_type == QUORUM and delivery_limit is None:
            delivery_limit = DEFAULT_QUORUM_DELIVERY_LIMIT
        message_ttl_ms = _integer(name, arguments, MESSAGE_TTL, minimum=0)
        expires_ms = _integer(name, arguments, EXPIRES, minimum=1)
        requeue_delay_ms = _integer(name, arguments, REQUEUE_DELAY, minimum=0) or 0
        max_length = _integer(name, arguments, MAX_LENGTH, minimum=0)
        max_length_bytes = _integer(name, arguments, MAX_LENGTH_BYTES, minimum=0)
        consumer_timeout_ms = _integer(name, arguments, CONSUMER_TIMEOUT, minimum=0)
        for arg in arguments:
            if arg in UNSUPPORTED_ARGUMENTS:
                raise _invalid(name, arg, "not supported by this gateway yet")
        priority = _max_priority(name, arguments)
        if priority and subscription_type == KEY_SHARED:
            raise _invalid(name, MAX_PRIORITY, f"a priority queue cannot be {KEY_SHARED}")
        if requeue_delay_ms and subscription_type == KEY_SHARED:   # it would reorder a group
            raise _invalid(name, REQUEUE_DELAY, f"a {KEY_SHARED} queue redelivers within its groups at once")
        poison_policy = arguments.get(GROUP_POISON_POLICY, BLOCK)
        if poison_policy not in POISON_POLICIES or (GROUP_POISON_POLICY in arguments and subscription_type != KEY_SHARED):
            raise _invalid(name, GROUP_POISON_POLICY, f"{_shown(poison_policy)!r} (block or skip, key-shared queues only)")
        if arguments.get(QUEUE_MODE) not in (None, *QUEUE_MODES):
            raise _invalid(name, QUEUE_MODE, repr(arguments[QUEUE_MODE]))
        return cls(queue_type=queue_type, message_ttl_ms=message_ttl_ms, expires_ms=expires_ms,
                   dead_letter_exchange=dlx, dead_letter_routing_key=dlrk,
                   max_length=max_length, max_length_bytes=max_length_bytes, overflow=overflow,
                   delivery_limit=delivery_limit if delivery_limit is not None and delivery_limit >= 0 else None,
                   max_priority=priority, subscription_type=subscription_type, group_poison_policy=poison_policy,
                   consumer_timeout_ms=consumer_timeout_ms,
                   requeue_delay_ms=requeue_delay_ms)


def check_equivalent(name: str, current: tuple[bool, bool, Mapping[str, Any]],
                     received: tuple[bool, bool, Mapping[str, Any]]) -> None:
    """InequivalentDeclaration when a redeclare, (durable, auto_delete, arguments), differs from the
    queue as it is in what RabbitMQ compares (the other arguments may differ)."""
    for flag, now, wanted in zip(("durable", "auto_delete"), current, received):
        if now != wanted:
            raise _inequivalent(name, flag, _shown(wanted), _shown(now))
    current_arguments, received_arguments = current[2], received[2]
    for arg in _ALWAYS_EQUIVALENT:
        old, new = current_arguments.get(arg), received_arguments.get(arg)
        if old != new:
            raise _inequivalent(name, arg, _shown(new) if new is not None else "none",
                                _shown(old) if old is not None else "none")
    check_equivalence(name, current_arguments, received_arguments)


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
            raise _inequivalent(name, arg, _shown(new), _shown(old))
        raise InequivalentDeclaration.about(Resource.queue(name), f"inequivalent arg '{arg}' for {RESOURCE}: received "
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
            raise InvalidArgument.about(Resource.queue(name),
                                        f"invalid arg '{arg}' for {RESOURCE} of queue type rabbit_quorum_queue")
        raise _invalid(name, arg, f'"expected integer, got {field_type(value)}"')
    value = int(value)
    if minimum is not None and value < minimum:
        raise _invalid(name, arg, f"{{value_zero,{value}}}" if value == 0 else f"{{value_negative,{value}}}")
    return value


def _max_priority(name: str, arguments: Mapping[str, Any]) -> int:
    value = arguments.get(MAX_PRIORITY)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(name, MAX_PRIORITY, f'"expected integer, got {field_type(value)}"')
    if value < 0:
        raise _invalid(name, MAX_PRIORITY, f"{{value_negative,{int(value)}}}")
    if value > MAX_SUPPORTED_PRIORITY:
        raise _invalid(name, MAX_PRIORITY, f"{{max_value_exceeded,{int(value)}}}")
    return int(value)


def subscription_type_of(name: str, arguments: Mapping[str, Any]) -> str:
    """x-subscription-type, with RabbitMQ's x-single-active-consumer as another way to say failover
    (InvalidArgument if they contradict)."""
    single = arguments.get(SINGLE_ACTIVE)
    if single is not None and not isinstance(single, bool):
        raise _invalid(name, SINGLE_ACTIVE, f"{{unacceptable_type,{field_type(single)}}}")
    value = arguments.get(SUBSCRIPTION_TYPE)
    if value is None:
        return FAILOVER if single else SHARED
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if value not in SUBSCRIPTION_TYPES:
        raise _invalid(name, SUBSCRIPTION_TYPE, f"{_shown(value)!r} (one of {', '.join(SUBSCRIPTION_TYPES)})")
    if single and value != FAILOVER:
        raise _invalid(name, SINGLE_ACTIVE, f"contradicts {SUBSCRIPTION_TYPE} {value}")
    return value


def _invalid(name: str, arg: str, reason: str) -> CoreError:
    return InvalidArgument.about(Resource.queue(name), f"invalid arg '{arg}' for {RESOURCE}: {reason}")


def _inequivalent(name: str, arg: str, received: str, current: str) -> CoreError:
    return InequivalentDeclaration.about(Resource.queue(name), f"inequivalent arg '{arg}' for {RESOURCE}: received "
                                                               f"'{received}' but current is '{current}'")


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

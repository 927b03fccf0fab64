"""AMQP 0-9-1 as RabbitMQ speaks it, declared once as data.

Every class and method is a `Method` value: ids, dotted name ("basic.publish"), fields (spec name
and domain, with the default a sender may leave out), whether it is synchronous, whether content
follows it, which methods answer it and which peer may send it. The codec (codec/methods.py) is
compiled from this table, the connection machine reads `sent_by` and `has_content` from it, and the
tests generate their round trips from it. RabbitMQ's extensions are included: basic.nack,
exchange.bind/unbind, connection.blocked/unblocked, connection.update-secret, confirm.select.

Reply codes are `ReplyCode`; `is_hard` says whether a code closes the connection (a hard error) or
only the channel (a soft error), as the spec's constants classify them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
VERSION_MAJOR, VERSION_MINOR = 0, 9

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = 0xCE
FRAME_OVERHEAD = 8        # type octet + channel short + size long + end octet
FRAME_MIN_SIZE = 4096     # the frame_max in force until tune-ok, and the least a peer may negotiate


class Domain(enum.StrEnum):
    """The wire types a method field or a property can have."""

    OCTET = "octet"
    SHORT = "short"
    LONG = "long"
    LONGLONG = "longlong"
    BIT = "bit"
    SHORTSTR = "shortstr"
    LONGSTR = "longstr"
    TIMESTAMP = "timestamp"
    TABLE = "table"


class ReplyCode(enum.IntEnum):
    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541

    @property
    def is_soft(self) -> bool:
        """A channel exception: the channel is closed, the connection lives on."""
        return self in _SOFT_CODES

    @property
    def is_hard(self) -> bool:
        """A connection exception: the whole connection is closed."""
        return self in _HARD_CODES


_SOFT_CODES = frozenset({
    ReplyCode.CONTENT_TOO_LARGE, ReplyCode.NO_ROUTE, ReplyCode.NO_CONSUMERS, ReplyCode.ACCESS_REFUSED,
    ReplyCode.NOT_FOUND, ReplyCode.RESOURCE_LOCKED, ReplyCode.PRECONDITION_FAILED,
})
_HARD_CODES = frozenset(set(ReplyCode) - _SOFT_CODES - {ReplyCode.REPLY_SUCCESS})

# Who may send a method (the spec's "chassis"): a method the client sends and the server implements.
CLIENT, SERVER = "client", "server"

NO_DEFAULT: Any = object()   # the field must be given when encoding


@dataclass(frozen=True, slots=True)
class Field:
    name: str                 # the spec's name: "routing-key"
    domain: Domain
    default: Any = NO_DEFAULT

    @property
    def attr(self) -> str:
        """The Python name the codec uses in argument dicts: "routing_key"."""
        return self.name.replace("-", "_")


@dataclass(frozen=True, slots=True)
class Method:
    class_id: int
    method_id: int
    name: str                          # "basic.publish"
    fields: tuple[Field, ...]
    synchronous: bool
    has_content: bool
    replies: tuple[str, ...]           # the methods that answer a synchronous request
    sent_by: frozenset[str]

    @property
    def key(self) -> tuple[int, int]:
        return self.class_id, self.method_id

    @property
    def class_name(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def sent_by_client(self) -> bool:
        return CLIENT in self.sent_by

    @property
    def sent_by_server(self) -> bool:
        return SERVER in self.sent_by


# --- declaration helpers: one line per field, one call per method ---------------------------------

def _f(name: str, domain: Domain, default: Any = NO_DEFAULT) -> Field:
    return Field(name, domain, default)


def _ticket() -> Field:
    return _f("ticket", Domain.SHORT, 0)   # reserved since 0-9-1, always 0


_O, _S, _L, _LL, _B = Domain.OCTET, Domain.SHORT, Domain.LONG, Domain.LONGLONG, Domain.BIT
_SS, _LS, _TS, _T = Domain.SHORTSTR, Domain.LONGSTR, Domain.TIMESTAMP, Domain.TABLE
_C, _SV, _BOTH = frozenset({CLIENT}), frozenset({SERVER}), frozenset({CLIENT, SERVER})

_CLASS_IDS = {"connection": 10, "channel": 20, "access": 30, "exchange": 40, "queue": 50,
              "basic": 60, "confirm": 85, "tx": 90}


def _m(name: str, method_id: int, fields: tuple[Field, ...] = (), *, by: frozenset[str],
       sync: bool = False, content: bool = False, reply: tuple[str, ...] | str = ()) -> Method:
    class_name = name.split(".", 1)[0]
    replies = (reply,) if isinstance(reply, str) else reply
    replies = tuple(r if "." in r else f"{class_name}.{r}" for r in replies)
    return Method(_CLASS_IDS[class_name], method_id, name, fields, sync, content, replies, by)


def _close_fields() -> tuple[Field, ...]:
    return (_f("reply-code", _S), _f("reply-text", _SS, ""), _f("class-id", _S, 0), _f("method-id", _S, 0))


METHODS: tuple[Method, ...] = (
    # connection
    _m("connection.start", 10, (_f("version-major", _O, VERSION_MAJOR), _f("version-minor", _O, VERSION_MINOR),
                                _f("server-properties", _T), _f("mechanisms", _LS, b"PLAIN"),
                                _f("locales", _LS, b"en_US")),
       by=_SV, sync=True, reply="start-ok"),
    _m("connection.start-ok", 11, (_f("client-properties", _T), _f("mechanism", _SS, "PLAIN"),
                                   _f("response", _LS), _f("locale", _SS, "en_US")), by=_C),
    _m("connection.secure", 20, (_f("challenge", _LS),), by=_SV, sync=True, reply="secure-ok"),
    _m("connection.secure-ok", 21, (_f("response", _LS),), by=_C),
    _m("connection.tune", 30, (_f("channel-max", _S, 0), _f("frame-max", _L, 0), _f("heartbeat", _S, 0)),
       by=_SV, sync=True, reply="tune-ok"),
    _m("connection.tune-ok", 31, (_f("channel-max", _S, 0), _f("frame-max", _L, 0), _f("heartbeat", _S, 0)),
       by=_C),
    _m("connection.open", 40, (_f("virtual-host", _SS, "/"), _f("capabilities", _SS, ""), _f("insist", _B, False)),
       by=_C, sync=True, reply="open-ok"),
    _m("connection.open-ok", 41, (_f("known-hosts", _SS, ""),), by=_SV),
    _m("connection.close", 50, _close_fields(), by=_BOTH, sync=True, reply="close-ok"),
    _m("connection.close-ok", 51, by=_BOTH),
    _m("connection.blocked", 60, (_f("reason", _SS, ""),), by=_SV),
    _m("connection.unblocked", 61, by=_SV),
    _m("connection.update-secret", 70, (_f("new-secret", _LS), _f("reason", _SS)),
       by=_C, sync=True, reply="update-secret-ok"),
    _m("connection.update-secret-ok", 71, by=_SV),
    # channel
    _m("channel.open", 10, (_f("out-of-band", _SS, ""),), by=_C, sync=True, reply="open-ok"),
    _m("channel.open-ok", 11, (_f("channel-id", _LS, b""),), by=_SV),
    _m("channel.flow", 20, (_f("active", _B),), by=_BOTH, sync=True, reply="flow-ok"),
    _m("channel.flow-ok", 21, (_f("active", _B),), by=_BOTH),
    _m("channel.close", 40, _close_fields(), by=_BOTH, sync=True, reply="close-ok"),
    _m("channel.close-ok", 41, by=_BOTH),
    # access (deprecated; RabbitMQ still answers it)
    _m("access.request", 10, (_f("realm", _SS, "/data"), _f("exclusive", _B, False), _f("passive", _B, True),
                              _f("active", _B, True), _f("write", _B, True), _f("read", _B, True)),
       by=_C, sync=True, reply="request-ok"),
    _m("access.request-ok", 11, (_f("ticket", _S, 1),), by=_SV),
    # exchange
    _m("exchange.declare", 10, (_ticket(), _f("exchange", _SS), _f("type", _SS, "direct"), _f("passive", _B, False),
                                _f("durable", _B, False), _f("auto-delete", _B, False), _f("internal", _B, False),
                                _f("nowait", _B, False), _f("arguments", _T, {})),
       by=_C, sync=True, reply="declare-ok"),
    _m("exchange.declare-ok", 11, by=_SV),
    _m("exchange.delete", 20, (_ticket(), _f("exchange", _SS), _f("if-unused", _B, False), _f("nowait", _B, False)),
       by=_C, sync=True, reply="delete-ok"),
    _m("exchange.delete-ok", 21, by=_SV),
    _m("exchange.bind", 30, (_ticket(), _f("destination", _SS), _f("source", _SS), _f("routing-key", _SS, ""),
                             _f("nowait", _B, False), _f("arguments", _T, {})),
       by=_C, sync=True, reply="bind-ok"),
    _m("exchange.bind-ok", 31, by=_SV),
    _m("exchange.unbind", 40, (_ticket(), _f("destination", _SS), _f("source", _SS), _f("routing-key", _SS, ""),
                               _f("nowait", _B, False), _f("arguments", _T, {})),
       by=_C, sync=True, reply="unbind-ok"),
    _m("exchange.unbind-ok", 51, by=_SV),   # 51, not 41: RabbitMQ's extension numbers it so
    # queue
    _m("queue.declare", 10, (_ticket(), _f("queue", _SS, ""), _f("passive", _B, False), _f("durable", _B, False),
                             _f("exclusive", _B, False), _f("auto-delete", _B, False), _f("nowait", _B, False),
                             _f("arguments", _T, {})),
       by=_C, sync=True, reply="declare-ok"),
    _m("queue.declare-ok", 11, (_f("queue", _SS), _f("message-count", _L), _f("consumer-count", _L)), by=_SV),
    _m("queue.bind", 20, (_ticket(), _f("queue", _SS, ""), _f("exchange", _SS), _f("routing-key", _SS, ""),
                          _f("nowait", _B, False), _f("arguments", _T, {})),
       by=_C, sync=True, reply="bind-ok"),
    _m("queue.bind-ok", 21, by=_SV),
    _m("queue.purge", 30, (_ticket(), _f("queue", _SS, ""), _f("nowait", _B, False)),
       by=_C, sync=True, reply="purge-ok"),
    _m("queue.purge-ok", 31, (_f("message-count", _L),), by=_SV),
    _m("queue.delete", 40, (_ticket(), _f("queue", _SS, ""), _f("if-unused", _B, False), _f("if-empty", _B, False),
                            _f("nowait", _B, False)),
       by=_C, sync=True, reply="delete-ok"),
    _m("queue.delete-ok", 41, (_f("message-count", _L),), by=_SV),
    _m("queue.unbind", 50, (_ticket(), _f("queue", _SS, ""), _f("exchange", _SS), _f("routing-key", _SS, ""),
                            _f("arguments", _T, {})),
       by=_C, sync=True, reply="unbind-ok"),
    _m("queue.unbind-ok", 51, by=_SV),
    # basic
    _m("basic.qos", 10, (_f("prefetch-size", _L, 0), _f("prefetch-count", _S, 0), _f("global", _B, False)),
       by=_C, sync=True, reply="qos-ok"),
    _m("basic.qos-ok", 11, by=_SV),
    _m("basic.consume", 20, (_ticket(), _f("queue", _SS, ""), _f("consumer-tag", _SS, ""), _f("no-local", _B, False),
                             _f("no-ack", _B, False), _f("exclusive", _B, False), _f("nowait", _B, False),
                             _f("arguments", _T, {})),
       by=_C, sync=True, reply="consume-ok"),
    _m("basic.consume-ok", 21, (_f("consumer-tag", _SS),), by=_SV),
    # The server sends basic.cancel too (consumer_cancel_notify); clients do not answer that one.
    _m("basic.cancel", 30, (_f("consumer-tag", _SS), _f("nowait", _B, False)), by=_BOTH, sync=True, reply="cancel-ok"),
    _m("basic.cancel-ok", 31, (_f("consumer-tag", _SS),), by=_SV),
    _m("basic.publish", 40, (_ticket(), _f("exchange", _SS, ""), _f("routing-key", _SS, ""),
                             _f("mandatory", _B, False), _f("immediate", _B, False)), by=_C, content=True),
    _m("basic.return", 50, (_f("reply-code", _S), _f("reply-text", _SS, ""), _f("exchange", _SS),
                            _f("routing-key", _SS)), by=_SV, content=True),
    _m("basic.deliver", 60, (_f("consumer-tag", _SS), _f("delivery-tag", _LL), _f("redelivered", _B, False),
                             _f("exchange", _SS), _f("routing-key", _SS)), by=_SV, content=True),
    _m("basic.get", 70, (_ticket(), _f("queue", _SS, ""), _f("no-ack", _B, False)),
       by=_C, sync=True, reply=("get-ok", "get-empty")),
    _m("basic.get-ok", 71, (_f("delivery-tag", _LL), _f("redelivered", _B, False), _f("exchange", _SS),
                            _f("routing-key", _SS), _f("message-count", _L)), by=_SV, content=True),
    _m("basic.get-empty", 72, (_f("cluster-id", _SS, ""),), by=_SV),
    # ack and nack travel both ways: the client acknowledges deliveries, the server confirms publishes.
    _m("basic.ack", 80, (_f("delivery-tag", _LL, 0), _f("multiple", _B, False)), by=_BOTH),
    _m("basic.reject", 90, (_f("delivery-tag", _LL), _f("requeue", _B, True)), by=_C),
    _m("basic.recover-async", 100, (_f("requeue", _B, False),), by=_C),
    _m("basic.recover", 110, (_f("requeue", _B, False),), by=_C, sync=True, reply="recover-ok"),
    _m("basic.recover-ok", 111, by=_SV),
    _m("basic.nack", 120, (_f("delivery-tag", _LL, 0), _f("multiple", _B, False), _f("requeue", _B, True)),
       by=_BOTH),
    # confirm
    _m("confirm.select", 10, (_f("nowait", _B, False),), by=_C, sync=True, reply="select-ok"),
    _m("confirm.select-ok", 11, by=_SV),
    # tx
    _m("tx.select", 10, by=_C, sync=True, reply="select-ok"),
    _m("tx.select-ok", 11, by=_SV),
    _m("tx.commit", 20, by=_C, sync=True, reply="commit-ok"),
    _m("tx.commit-ok", 21, by=_SV),
    _m("tx.rollback", 30, by=_C, sync=True, reply="rollback-ok"),
    _m("tx.rollback-ok", 31, by=_SV),
)

METHODS_BY_NAME: Mapping[str, Method] = MappingProxyType({m.name: m for m in METHODS})
METHODS_BY_ID: Mapping[tuple[int, int], Method] = MappingProxyType({m.key: m for m in METHODS})
CLASS_IDS: Mapping[str, int] = MappingProxyType(dict(_CLASS_IDS))

BASIC_CLASS_ID = _CLASS_IDS["basic"]

# The content header properties of class basic, in property-flag order (bit 15 first).
BASIC_PROPERTIES: tuple[Field, ...] = (
    _f("content-type", _SS, None), _f("content-encoding", _SS, None), _f("headers", _T, None),
    _f("delivery-mode", _O, None), _f("priority", _O, None), _f("correlation-id", _SS, None),
    _f("reply-to", _SS, None), _f("expiration", _SS, None), _f("message-id", _SS, None),
    _f("timestamp", _TS, None), _f("type", _SS, None), _f("user-id", _SS, None),
    _f("app-id", _SS, None), _f("cluster-id", _SS, None),
)


def method(name: str) -> Method:
    """The declaration of `name` ("basic.publish"); KeyError for a name the spec does not have."""
    return METHODS_BY_NAME[name]


def _check_table() -> None:
    # The table is hand-written; catch typos at import rather than on the wire.
    assert len(METHODS_BY_NAME) == len(METHODS) == len(METHODS_BY_ID)
    for m in METHODS:
        assert all(r in METHODS_BY_NAME for r in m.replies), m.name
        assert m.synchronous == bool(m.replies), m.name
        assert len({f.name for f in m.fields}) == len(m.fields), m.name


_check_table()

"""The server side of the AMQP 0-9-1 connection handshake, without I/O.

    client: protocol header          server: connection.start (properties, mechanisms, locales)
    client: connection.start-ok      -> AuthenticationRequested; the caller accepts or refuses
    server: connection.tune          client: connection.tune-ok   -> ConnectionTuned
    client: connection.open          -> VhostOpenRequested; the caller accepts or refuses
    server: connection.open-ok

Rules, as RabbitMQ applies them: a wrong protocol header gets our header back and the socket
closed; a mechanism we did not offer is COMMAND_INVALID; EXTERNAL (offered on TLS connections with
a client certificate) carries no credentials: the caller names the user from the certificate, and
its response (an optional authorization identity) is ignored, as RabbitMQ does; a malformed PLAIN ("\\0user\\0pass") or
AMQPLAIN (a field table without its length prefix, with LOGIN and PASSWORD) response is
SYNTAX_ERROR; tune-ok may lower channel_max and frame_max but not raise them or ask for 0 (no
limit), and frame_max may not go under 4096 (NOT_ALLOWED); a method out of order is CHANNEL_ERROR
("unexpected method in connection state ...").
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from protocols.amqp.codec.errors import DecodeError
from protocols.amqp.codec.field_table import decode_table_body
from protocols.amqp.codec.frames import encode_frame
from protocols.amqp.codec.methods import encode_method
from protocols.amqp.codec.primitives import TEXT_ERRORS, Reader
from protocols.amqp.machine.errors import AmqpConnectionError, LocalProtocolError
from protocols.amqp.machine.events import AuthenticationRequested, ConnectionTuned, Event, VhostOpenRequested
from protocols.amqp.machine.settings import ServerSettings
from protocols.amqp.spec import FRAME_METHOD, FRAME_MIN_SIZE, PROTOCOL_HEADER, Method, ReplyCode

CHANNEL_MIN = 1
EXTERNAL = "EXTERNAL"


class HandshakeState(enum.Enum):
    AWAITING_HEADER = "awaiting_header"
    STARTING = "starting"              # connection.start sent, start-ok awaited
    SECURING = "securing"              # credentials handed to the caller, decision awaited
    TUNING = "tuning"                  # connection.tune sent, tune-ok awaited
    OPENING = "opening"                # connection.open awaited
    OPEN_REQUESTED = "open_requested"  # vhost handed to the caller, decision awaited
    DONE = "done"


def method_frame(channel: int, method: Method | str, **args: Any) -> bytes:
    return encode_frame(FRAME_METHOD, channel, encode_method(method, args))


class ServerHandshake:
    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.state = HandshakeState.AWAITING_HEADER
        self.client_properties: Mapping[str, Any] = {}
        self.mechanism = ""
        self.username = ""
        self.channel_max = settings.channel_max
        self.frame_max = FRAME_MIN_SIZE
        self.heartbeat = 0
        self.vhost = ""

    @property
    def client_capabilities(self) -> Mapping[str, Any]:
        capabilities = self.client_properties.get("capabilities")
        return capabilities if isinstance(capabilities, Mapping) else {}

    def receive_header(self, header: bytes) -> tuple[bool, bytes]:
        """(accepted, bytes to send): connection.start, or our own header for a wrong one."""
        if header != PROTOCOL_HEADER:
            return False, PROTOCOL_HEADER
        self.state = HandshakeState.STARTING
        settings = self.settings
        return True, method_frame(
            0, "connection.start",
            server_properties=settings.server_properties(),
            mechanisms=" ".join(settings.mechanisms).encode(),
            locales=" ".join(settings.locales).encode(),
        )

    def receive_method(self, method: Method, args: Mapping[str, Any]) -> Event:
        """A channel-0 method during the handshake (connection.close is the caller's business)."""
        expected = {
            HandshakeState.STARTING: "connection.start-ok",
            HandshakeState.TUNING: "connection.tune-ok",
            HandshakeState.OPENING: "connection.open",
        }.get(self.state)
        if method.name != expected:
            raise AmqpConnectionError(ReplyCode.CHANNEL_ERROR,
                                      f"unexpected method in connection state {self.state.value}", *method.key)
        if method.name == "connection.start-ok":
            return self._start_ok(method, args)
        if method.name == "connection.tune-ok":
            return self._tune_ok(method, args)
        self.state = HandshakeState.OPEN_REQUESTED
        self.vhost = args["virtual_host"]
        return VhostOpenRequested(self.vhost)

    def _start_ok(self, method: Method, args: Mapping[str, Any]) -> AuthenticationRequested:
        self.client_properties = args["client_properties"]
        mechanism = args["mechanism"]
        if mechanism not in self.settings.mechanisms:
            raise AmqpConnectionError(ReplyCode.COMMAND_INVALID,
                                      f"unknown authentication mechanism '{mechanism}'", *method.key)
        response: bytes = args["response"]
        if mechanism == "PLAIN":
            username, password = parse_plain_response(response)
        elif mechanism == "AMQPLAIN":
            username, password = parse_amqplain_response(response)
        elif mechanism == EXTERNAL:
            username, password = "", ""
        else:   # a mechanism configured in settings but not implemented here
            raise AmqpConnectionError(ReplyCode.COMMAND_INVALID,
                                      f"invalid authentication mechanism '{mechanism}'", *method.key)
        self.mechanism, self.username = mechanism, username
        self.state = HandshakeState.SECURING
        return AuthenticationRequested(mechanism, username, password, self.client_properties)

    def accept_authentication(self, username: str | None = None) -> bytes:
        """`username`: who logged in, where the credentials did not say (EXTERNAL)."""
        self._require(HandshakeState.SECURING, "accept_authentication")
        if username is not None:
            self.username = username
        self.state = HandshakeState.TUNING
        settings = self.settings
        return method_frame(0, "connection.tune", channel_max=settings.channel_max,
                            frame_max=settings.frame_max, heartbeat=settings.heartbeat)

    def _tune_ok(self, method: Method, args: Mapping[str, Any]) -> ConnectionTuned:
        frame_max = negotiated("frame_max", FRAME_MIN_SIZE, self.settings.frame_max, args["frame_max"], method)
        channel_max = negotiated("channel_max", CHANNEL_MIN, self.settings.channel_max, args["channel_max"], method)
        self.frame_max, self.channel_max, self.heartbeat = frame_max, channel_max, args["heartbeat"]
        self.state = HandshakeState.OPENING
        return ConnectionTuned(channel_max, frame_max, self.heartbeat)

    def accept_vhost(self) -> bytes:
        self._require(HandshakeState.OPEN_REQUESTED, "accept_vhost")
        self.state = HandshakeState.DONE
        return method_frame(0, "connection.open-ok")

    def finish_refused(self, expected: HandshakeState, action: str) -> None:
        self._require(expected, action)
        self.state = HandshakeState.DONE

    def _require(self, state: HandshakeState, action: str) -> None:
        if self.state is not state:
            raise LocalProtocolError(f"{action} in handshake state {self.state.value}")


def negotiated(name: str, minimum: int, server_value: int, client_value: int, method: Method) -> int:
    """The client's tune-ok value, if RabbitMQ would accept it: NOT_ALLOWED otherwise."""
    if client_value != 0 and client_value < minimum:
        raise AmqpConnectionError(ReplyCode.NOT_ALLOWED, f"negotiated {name} = {client_value} is lower than "
                                  f"the minimum allowed value ({minimum})", *method.key)
    if server_value != 0 and (client_value == 0 or client_value > server_value):
        shown = f"{client_value} (no limit)" if client_value == 0 else str(client_value)
        raise AmqpConnectionError(ReplyCode.NOT_ALLOWED, f"negotiated {name} = {shown} is higher than "
                                  f"the maximum allowed value ({server_value})", *method.key)
    return client_value


def parse_plain_response(response: bytes) -> tuple[str, str]:
    """SASL PLAIN as RabbitMQ reads it: an empty authorization identity, then "\\0user\\0pass"."""
    parts = response.split(b"\0")
    if len(parts) != 3 or parts[0]:
        raise AmqpConnectionError(ReplyCode.SYNTAX_ERROR, "PLAIN response invalid: expected \\0user\\0password")
    return _text(parts[1]), _text(parts[2])


def parse_amqplain_response(response: bytes) -> tuple[str, str]:
    """AMQPLAIN: field table entries (no length prefix) with string LOGIN and PASSWORD."""
    try:
        table = decode_table_body(Reader(response))
    except DecodeError as exc:
        raise AmqpConnectionError(ReplyCode.SYNTAX_ERROR, f"AMQPLAIN response is not a field table: {exc}") from None
    login, password = table.get("LOGIN"), table.get("PASSWORD")
    if login is None or password is None:
        raise AmqpConnectionError(ReplyCode.SYNTAX_ERROR, "AMQPLAIN auth info is missing LOGIN or PASSWORD field")
    if not isinstance(login, (str, bytes)) or not isinstance(password, (str, bytes)):
        raise AmqpConnectionError(ReplyCode.SYNTAX_ERROR,
                                  "AMQPLAIN auth info uses unsupported type for LOGIN or PASSWORD field")
    return _text(login), _text(password)


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", TEXT_ERRORS)

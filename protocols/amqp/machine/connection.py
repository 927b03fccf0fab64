"""One AMQP 0-9-1 client connection's protocol rules, server side, without I/O (h11/wsproto style).

    conn = AmqpServerConnection(ServerSettings(capabilities={...}))
    for event in conn.receive_data(chunk, now=clock()):   # b"" means EOF
        ...write event.data where an event has it; answer others with the send helpers...
    if conn.terminated: flush and close the socket

It owns: the protocol header; the handshake (handshake.py); framing and the frame_max limit
(4096 until tune-ok, checked before buffering); channel lifecycle (open, close in both directions,
the close-ok that frees a number; channel_max); per-channel content assembly (assembler.py);
which methods a client may send; turning every violation into the close RabbitMQ would send; and
heartbeat bookkeeping (heartbeat.py) from clock values the caller passes in.

Errors found while reading never escape receive_data: they become ChannelErrorRaised or
ConnectionErrorRaised events carrying the close to write. The only exception receive_data raises
is LocalProtocolError, for being called again after it was given EOF.

Reading pauses at AuthenticationRequested and VhostOpenRequested, since what follows depends on the
answer: bytes that arrive meanwhile are buffered (up to MAX_BUFFERED_WHILE_PAUSED), and after
accept_authentication() / accept_vhost() the caller collects what they complete with next_events().

Sending follows RabbitMQ's writer: once we have sent channel.close, or the client has, nothing but
the close-ok goes out on that channel; once connection.close went either way, nothing but the
close-ok goes out at all. The send helpers return b"" for what they drop, so a late delivery for a
closed channel is harmless. Misuse (an unknown method, one a server never sends, a content method
through send_method) raises LocalProtocolError; bad argument values raise TypeError/ValueError.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from protocols.amqp.codec.errors import DecodeError
from protocols.amqp.codec.frames import FRAME_TYPES, HEARTBEAT_FRAME, Frame, FrameReader, encode_frame
from protocols.amqp.codec.methods import decode_arguments, lookup, method_key
from protocols.amqp.codec.properties import BasicProperties, ContentProperties, encode_content_header
from protocols.amqp.machine.assembler import AssembledContent, ContentAssembler
from protocols.amqp.machine.errors import AmqpConnectionError, AmqpError, ChannelError, LocalProtocolError
from protocols.amqp.machine.events import (
    AuthenticationRequested, ChannelErrorRaised, ConnectionCloseRequested, ConnectionClosed, ConnectionErrorRaised,
    ConnectionLost, ConnectionTuned, ContentReceived, Event, HeartbeatReceived, MethodReceived,
    ProtocolHeaderAccepted, ProtocolHeaderRejected, VhostOpenRequested,
)
from protocols.amqp.machine.handshake import HandshakeState, ServerHandshake, method_frame
from protocols.amqp.machine.heartbeat import HeartbeatClock
from protocols.amqp.machine.settings import ServerSettings
from protocols.amqp.spec import (
    FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD, FRAME_MIN_SIZE, FRAME_OVERHEAD, METHODS_BY_NAME,
    PROTOCOL_HEADER, Method, ReplyCode,
)

_CONNECTION_CLOSE, _CONNECTION_CLOSE_OK = (10, 50), (10, 51)
_CHANNEL_CLOSE, _CHANNEL_CLOSE_OK = (20, 40), (20, 41)
_CONNECTION_CLASS = 10
# A client that keeps sending while we decide on its credentials or vhost is cut off past this.
MAX_BUFFERED_WHILE_PAUSED = 64 * 1024
# What send_method may put on channel 0 once the handshake is over (the handshake has helpers).
_SENDABLE_ON_CHANNEL_ZERO = frozenset({"connection.close", "connection.close-ok", "connection.blocked",
                                       "connection.unblocked", "connection.update-secret-ok"})


class ConnectionState(enum.Enum):
    AWAITING_HEADER = "awaiting_header"
    HANDSHAKE = "handshake"
    OPEN = "open"
    CLOSING = "closing"            # we sent connection.close; waiting for close-ok
    PEER_CLOSING = "peer_closing"  # the client sent connection.close; our close-ok is due
    TERMINATED = "terminated"      # nothing more to read or write: close the socket


class ChannelState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"            # we sent channel.close; waiting for close-ok
    PEER_CLOSING = "peer_closing"  # the client sent channel.close; our close-ok is due


class _Channel:
    __slots__ = ("state", "assembler", "close_ok_due")

    def __init__(self, max_message_size: int) -> None:
        self.state = ChannelState.OPEN
        self.assembler = ContentAssembler(max_message_size)
        self.close_ok_due = False    # the client sent channel.close and awaits our close-ok


class AmqpServerConnection:
    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.state = ConnectionState.AWAITING_HEADER
        self._handshake = ServerHandshake(settings)
        self._header = bytearray()
        self._reader = FrameReader(FRAME_MIN_SIZE)
        self._channels: dict[int, _Channel] = {}
        self._eof = False
        self._peer_close_pending = False    # the client's connection.close awaits our close-ok
        self._awaiting_decision = False     # AuthenticationRequested or VhostOpenRequested unanswered
        self._closed_cleanly = False        # a connection.close was answered with close-ok, either way
        self.heartbeat = HeartbeatClock()

    # --- what was negotiated --------------------------------------------------------------------

    @property
    def terminated(self) -> bool:
        return self.state is ConnectionState.TERMINATED

    @property
    def frame_max(self) -> int:
        return self._reader.frame_max

    @property
    def channel_max(self) -> int:
        return self._handshake.channel_max

    @property
    def heartbeat_interval(self) -> int:
        return int(self.heartbeat.interval)

    @property
    def vhost(self) -> str:
        return self._handshake.vhost

    @property
    def username(self) -> str:
        return self._handshake.username

    @property
    def client_properties(self) -> Mapping[str, Any]:
        return self._handshake.client_properties

    @property
    def client_capabilities(self) -> Mapping[str, Any]:
        return self._handshake.client_capabilities

    def channel_state(self, channel: int) -> ChannelState | None:
        record = self._channels.get(channel)
        return None if record is None else record.state

    @property
    def channels(self) -> dict[int, ChannelState]:
        return {number: record.state for number, record in self._channels.items()}

    # --- heartbeats -----------------------------------------------------------------------------

    def mark_sent(self, now: float) -> None:
        """Call after writing anything: a busy connection needs no heartbeats."""
        self.heartbeat.mark_sent(now)

    def mark_received(self, now: float) -> None:
        self.heartbeat.mark_received(now)

    def needs_heartbeat(self, now: float) -> bool:
        return self.state is not ConnectionState.TERMINATED and self.heartbeat.needs_heartbeat(now)

    def peer_is_dead(self, now: float) -> bool:
        return self.state is not ConnectionState.TERMINATED and self.heartbeat.peer_is_dead(now)

    def send_heartbeat(self) -> bytes:
        if self.state in (ConnectionState.AWAITING_HEADER, ConnectionState.TERMINATED):
            return b""
        return HEARTBEAT_FRAME

    # --- input ----------------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview, now: float | None = None) -> list[Event]:
        """The events the bytes complete, in order. b"" is EOF."""
        if self._eof:
            raise LocalProtocolError("receive_data after EOF")
        if now is not None:
            self.heartbeat.mark_received(now)
        if not data:
            self._eof = True
            self.state = ConnectionState.TERMINATED
            return [ConnectionLost(self._closed_cleanly)]
        if self.state is ConnectionState.TERMINATED:
            return []
        events: list[Event] = []
        if self.state is ConnectionState.AWAITING_HEADER:
            self._header += data
            if len(self._header) < len(PROTOCOL_HEADER):
                return events
            header, data = bytes(self._header[:8]), bytes(self._header[8:])
            self._header.clear()
            accepted, reply = self._handshake.receive_header(header)
            if not accepted:
                self.state = ConnectionState.TERMINATED
                return [ProtocolHeaderRejected(header, reply)]
            self.state = ConnectionState.HANDSHAKE
            events.append(ProtocolHeaderAccepted(reply))
        self._reader.feed(data)
        if self._awaiting_decision and self._reader.buffered > MAX_BUFFERED_WHILE_PAUSED:
            self._connection_error(AmqpConnectionError(
                ReplyCode.COMMAND_INVALID, f"{self._reader.buffered} bytes sent before the handshake was answered"),
                events)
            return events
        self._process(events)
        return events

    def next_events(self) -> list[Event]:
        """Events from input that arrived while a handshake decision was pending (a client that
        pipelines its handshake): call after accept_authentication() and accept_vhost()."""
        events: list[Event] = []
        if self.state is not ConnectionState.TERMINATED and not self._eof:
            self._process(events)
        return events

    def _process(self, events: list[Event]) -> None:
        while self.state is not ConnectionState.TERMINATED and not self._awaiting_decision:
            try:
                frame = self._reader.next_frame()
            except DecodeError as exc:
                self._lose_sync(exc, events)
                break
            if frame is None:
                break
            try:
                self._frame(frame, events)
            except (AmqpError, DecodeError) as exc:
                self._connection_error(exc, events)

    def _lose_sync(self, exc: DecodeError, events: list[Event]) -> None:
        if self.state in (ConnectionState.HANDSHAKE, ConnectionState.OPEN):
            error = AmqpConnectionError(exc.reply_code, str(exc))
            data = self._close_frame(error)
            events.append(ConnectionErrorRaised(error.reply_code, error.reply_text, 0, 0, data, lost_sync=True))
        self.state = ConnectionState.TERMINATED

    def _connection_error(self, exc: AmqpError | DecodeError, events: list[Event]) -> None:
        if self.state not in (ConnectionState.HANDSHAKE, ConnectionState.OPEN):
            return    # already closing: errors in what we would ignore anyway change nothing
        error = exc if isinstance(exc, AmqpError) else AmqpConnectionError(exc.reply_code, str(exc))
        data = self._close_frame(error)
        events.append(ConnectionErrorRaised(error.reply_code, error.reply_text, error.class_id, error.method_id,
                                            data, lost_sync=False))

    def _frame(self, frame: Frame, events: list[Event]) -> None:
        state = self.state
        if state is ConnectionState.CLOSING:
            self._frame_while_closing(frame, events)
            return
        if state is ConnectionState.PEER_CLOSING:
            return    # the client said it is done; it may not send more, and we do not listen
        if frame.type not in FRAME_TYPES:
            raise AmqpConnectionError(ReplyCode.FRAME_ERROR, f"unknown frame type {frame.type} "
                                      f"on channel {frame.channel}")
        if frame.type == FRAME_HEARTBEAT:
            if frame.payload:
                raise AmqpConnectionError(ReplyCode.FRAME_ERROR, "heartbeat frame with a payload")
            if frame.channel != 0:
                raise AmqpConnectionError(ReplyCode.UNEXPECTED_FRAME, f"heartbeat on channel {frame.channel}")
            events.append(HeartbeatReceived())
        elif frame.channel == 0:
            self._channel_zero(frame, events)
        elif state is not ConnectionState.OPEN:
            raise AmqpConnectionError(ReplyCode.UNEXPECTED_FRAME,
                                      f"frame of type {frame.type} on channel {frame.channel} before connection.open-ok")
        else:
            try:
                self._channel_frame(frame, events)
            except ChannelError as exc:
                if exc.closes_connection:
                    raise
                self._channel_error(frame.channel, exc, events)

    # --- channel 0 ------------------------------------------------------------------------------

    def _channel_zero(self, frame: Frame, events: list[Event]) -> None:
        if frame.type != FRAME_METHOD:
            raise AmqpConnectionError(ReplyCode.UNEXPECTED_FRAME, f"frame of type {frame.type} on channel 0")
        method, args = self._decode_method(frame.payload)
        if method.key == _CONNECTION_CLOSE:
            self._peer_closes(args, events)
        elif self.state is ConnectionState.HANDSHAKE:
            event = self._handshake.receive_method(method, args)
            if isinstance(event, (AuthenticationRequested, VhostOpenRequested)):
                self._awaiting_decision = True   # stop reading: what follows depends on the answer
            elif isinstance(event, ConnectionTuned):
                self._reader.frame_max = event.frame_max
                self.heartbeat.interval = event.heartbeat
            events.append(event)
        elif method.name == "connection.update-secret":
            events.append(MethodReceived(0, method.name, args))
        else:
            raise AmqpConnectionError(ReplyCode.CHANNEL_ERROR,
                                      "unexpected method in connection state running", *method.key)

    def _peer_closes(self, args: Mapping[str, Any], events: list[Event]) -> None:
        self.state = ConnectionState.PEER_CLOSING
        self._peer_close_pending = True
        events.append(ConnectionCloseRequested(args["reply_code"], args["reply_text"], args["class_id"],
                                               args["method_id"]))

    def _frame_while_closing(self, frame: Frame, events: list[Event]) -> None:
        """After our connection.close only close and close-ok on channel 0 mean anything."""
        if frame.type != FRAME_METHOD or frame.channel != 0 or len(frame.payload) < 4:
            return
        key = method_key(frame.payload)
        if key == _CONNECTION_CLOSE_OK:
            self.state = ConnectionState.TERMINATED
            self._closed_cleanly = True
            events.append(ConnectionClosed())
        elif key == _CONNECTION_CLOSE:
            try:
                args = decode_arguments(METHODS_BY_NAME["connection.close"], frame.payload)
            except DecodeError:
                return
            self._peer_close_pending = True   # the closes crossed: answer theirs, then we are done
            events.append(ConnectionCloseRequested(args["reply_code"], args["reply_text"], args["class_id"],
                                                   args["method_id"]))

    # --- channels > 0 ---------------------------------------------------------------------------

    def _channel_frame(self, frame: Frame, events: list[Event]) -> None:
        number = frame.channel
        record = self._channels.get(number)
        if record is None:
            self._open_channel(frame, events)
            return
        if record.state is ChannelState.CLOSING:
            self._frame_on_closing_channel(frame, events)
            return
        if record.state is ChannelState.PEER_CLOSING:
            return
        assembler = record.assembler
        completed: AssembledContent | None = None
        if frame.type == FRAME_METHOD:
            assembler.check_method_frame()
            method, args = self._decode_method(frame.payload)
            self._check_client_method(method)
            if method.name == "channel.open":
                raise AmqpConnectionError(ReplyCode.CHANNEL_ERROR, "second 'channel.open' seen", *method.key)
            if method.has_content:
                assembler.start(method, args)
                return
            if method.key == _CHANNEL_CLOSE:
                record.state = ChannelState.PEER_CLOSING
                record.close_ok_due = True
            elif method.key == _CHANNEL_CLOSE_OK:
                raise AmqpConnectionError(ReplyCode.CHANNEL_ERROR, "channel.close-ok without channel.close",
                                          *method.key)
            events.append(MethodReceived(number, method.name, args))
            return
        if frame.type == FRAME_HEADER:
            completed = assembler.header(frame.payload)
        elif frame.type == FRAME_BODY:
            completed = assembler.body(frame.payload)
        if completed is not None:
            events.append(ContentReceived(number, completed.method.name, completed.args, completed.properties,
                                          completed.body))

    def _open_channel(self, frame: Frame, events: list[Event]) -> None:
        if self.channel_max and len(self._channels) >= self.channel_max:
            raise AmqpConnectionError(ReplyCode.NOT_ALLOWED, f"number of channels opened ({len(self._channels)}) "
                                      f"has reached the negotiated channel_max ({self.channel_max})")
        if frame.type != FRAME_METHOD:
            raise AmqpConnectionError(ReplyCode.UNEXPECTED_FRAME,
                                      f"expected method frame, got frame of type {frame.type} on a closed channel")
        method, args = self._decode_method(frame.payload)
        if method.name != "channel.open":
            raise AmqpConnectionError(ReplyCode.CHANNEL_ERROR, "expected 'channel.open'", *method.key)
        self._channels[frame.channel] = _Channel(self.settings.max_message_size)
        events.append(MethodReceived(frame.channel, method.name, args))

    def _frame_on_closing_channel(self, frame: Frame, events: list[Event]) -> None:
        """After our channel.close only the client's close or close-ok mean anything on it."""
        if frame.type != FRAME_METHOD or len(frame.payload) < 4:
            return
        key = method_key(frame.payload)
        if key == _CHANNEL_CLOSE_OK:
            del self._channels[frame.channel]
            events.append(MethodReceived(frame.channel, "channel.close-ok", {}))
        elif key == _CHANNEL_CLOSE:
            try:
                args = decode_arguments(METHODS_BY_NAME["channel.close"], frame.payload)
            except DecodeError:
                return
            self._channels[frame.channel].close_ok_due = True    # the closes crossed: answer theirs too
            events.append(MethodReceived(frame.channel, "channel.close", args))

    def _check_client_method(self, method: Method) -> None:
        if method.class_id == _CONNECTION_CLASS or not method.sent_by_client:
            raise AmqpConnectionError(ReplyCode.COMMAND_INVALID, "unimplemented method", *method.key)

    def _channel_error(self, channel: int, error: ChannelError, events: list[Event]) -> None:
        data = self._send_channel_close(channel, error)
        events.append(ChannelErrorRaised(channel, error.reply_code, error.reply_text, error.class_id,
                                         error.method_id, data))

    @staticmethod
    def _decode_method(payload: bytes) -> tuple[Method, dict[str, Any]]:
        class_id, method_id = method_key(payload)
        method = lookup(class_id, method_id)
        if method is None:
            raise AmqpConnectionError(ReplyCode.NOT_IMPLEMENTED, f"unknown method {class_id}.{method_id}",
                                      class_id, method_id)
        return method, decode_arguments(method, payload)

    # --- handshake decisions --------------------------------------------------------------------

    def accept_authentication(self, username: str | None = None) -> bytes:
        """The credentials of AuthenticationRequested are good: connection.tune. `username`: the
        user an EXTERNAL login turned out to be."""
        self._require_handshake("accept_authentication")
        data = self._handshake.accept_authentication(username)
        self._awaiting_decision = False
        return data

    def refuse_authentication(self, mechanism: str | None = None) -> bytes:
        """The credentials are bad: ACCESS_REFUSED. As RabbitMQ, the connection.close is only sent to
        clients that announced the authentication_failure_close capability (b"" otherwise); either
        way the connection is over: write what is returned and close the socket."""
        self._require_handshake("refuse_authentication")
        self._handshake.finish_refused(HandshakeState.SECURING, "refuse_authentication")
        self._awaiting_decision = False
        mechanism = mechanism or self._handshake.mechanism
        data = b""
        if self.client_capabilities.get("authentication_failure_close") is True:
            error = AmqpConnectionError(ReplyCode.ACCESS_REFUSED, f"Login was refused using authentication "
                                        f"mechanism {mechanism}. For details see the broker logfile.")
            data = self._close_payload_frame(error)
        self.state = ConnectionState.TERMINATED
        return data

    def defer_authentication(self, explanation: str) -> bytes:
        """The credentials cannot be checked now (the user store is unreachable): CONNECTION_FORCED,
        whose meaning is "retry later", sent to every client (this is not a login refusal). The
        connection is over: write what is returned and close the socket."""
        self._require_handshake("defer_authentication")
        self._handshake.finish_refused(HandshakeState.SECURING, "defer_authentication")
        self._awaiting_decision = False
        self.state = ConnectionState.TERMINATED
        return self._close_payload_frame(AmqpConnectionError(ReplyCode.CONNECTION_FORCED, explanation))

    def accept_vhost(self) -> bytes:
        """The vhost of VhostOpenRequested may be used: connection.open-ok; the connection is open."""
        self._require_handshake("accept_vhost")
        data = self._handshake.accept_vhost()
        self._awaiting_decision = False
        self.state = ConnectionState.OPEN
        return data

    def refuse_vhost(self, explanation: str | None = None) -> bytes:
        """NOT_ALLOWED: connection.close; the client's close-ok (ConnectionClosed) ends it."""
        self._require_handshake("refuse_vhost")
        self._handshake.finish_refused(HandshakeState.OPEN_REQUESTED, "refuse_vhost")
        self._awaiting_decision = False
        explanation = explanation or (f"access to vhost '{self.vhost}' refused for user '{self.username}'")
        return self._close_frame(AmqpConnectionError(ReplyCode.NOT_ALLOWED, explanation,
                                                     method_name="connection.open"))

    def _require_handshake(self, action: str) -> None:
        if self.state is not ConnectionState.HANDSHAKE:
            raise LocalProtocolError(f"{action} in connection state {self.state.value}")

    # --- output ---------------------------------------------------------------------------------

    def send_method(self, channel: int, method_name: str, /, **args: Any) -> bytes:
        """A method frame; arguments by Python name, spec defaults for those left out.
        b"" when the channel or connection is closing and only a close-ok may go out."""
        method = self._server_method(method_name)
        if method.has_content:
            raise LocalProtocolError(f"{method_name} carries content: use send_content")
        if not self._may_send(channel, method):
            return b""
        data = method_frame(channel, method, **args)
        self._sent(channel, method)
        return data

    def send_content(self, channel: int, method_name: str,
                     properties: BasicProperties | ContentProperties | bytes | None, body: bytes | bytearray | memoryview,
                     /, **args: Any) -> bytes:
        """A content-bearing method (basic.deliver, basic.get-ok, basic.return), its header and its
        body split into frames of at most frame_max - 8 bytes. Raw ContentProperties are written
        back unchanged. b"" when the channel may no longer carry it."""
        method = self._server_method(method_name)
        if not method.has_content:
            raise LocalProtocolError(f"{method_name} carries no content: use send_method")
        if not self._may_send(channel, method):
            return b""
        body = memoryview(body).cast("B") if not isinstance(body, bytes) else body
        parts = [method_frame(channel, method, **args),
                 encode_frame(FRAME_HEADER, channel, encode_content_header(len(body), properties, method.class_id))]
        chunk = self.frame_max - FRAME_OVERHEAD if self.frame_max else max(len(body), 1)
        for offset in range(0, len(body), chunk):
            parts.append(encode_frame(FRAME_BODY, channel, body[offset:offset + chunk]))
        return b"".join(parts)

    def send_error(self, channel: int, error: AmqpError) -> bytes:
        """The close `error` calls for (see errors.py): channel.close for a soft error on a channel,
        connection.close otherwise. b"" if that channel or the connection is closing already."""
        if channel == 0 or error.closes_connection:
            if self.state not in (ConnectionState.HANDSHAKE, ConnectionState.OPEN):
                return b""
            return self._close_frame(error)
        record = self._channels.get(channel)
        if self.state is not ConnectionState.OPEN or record is None or record.state is not ChannelState.OPEN:
            return b""
        return self._send_channel_close(channel, error)

    def _send_channel_close(self, channel: int, error: AmqpError) -> bytes:
        record = self._channels[channel]
        record.state = ChannelState.CLOSING
        record.assembler.reset()
        return method_frame(channel, "channel.close", reply_code=error.reply_code, reply_text=error.reply_text,
                            class_id=error.class_id, method_id=error.method_id)

    def _close_frame(self, error: AmqpError) -> bytes:
        data = self._close_payload_frame(error)
        self.state = ConnectionState.CLOSING
        return data

    @staticmethod
    def _close_payload_frame(error: AmqpError) -> bytes:
        return method_frame(0, "connection.close", reply_code=error.reply_code, reply_text=error.reply_text,
                            class_id=error.class_id, method_id=error.method_id)

    def _server_method(self, method_name: str) -> Method:
        method = METHODS_BY_NAME.get(method_name)
        if method is None:
            raise LocalProtocolError(f"no such method {method_name!r}")
        if not method.sent_by_server:
            raise LocalProtocolError(f"{method_name} is not sent by servers")
        return method

    def _may_send(self, channel: int, method: Method) -> bool:
        state = self.state
        if channel == 0:
            if method.name not in _SENDABLE_ON_CHANNEL_ZERO:
                raise LocalProtocolError(f"{method.name} is not sent on channel 0 by send_method "
                                         "(the handshake has its own helpers)")
            if method.name == "connection.close-ok":
                return self._peer_close_pending
            if method.name == "connection.close":
                return state in (ConnectionState.HANDSHAKE, ConnectionState.OPEN)
            return state is ConnectionState.OPEN
        if method.class_id == _CONNECTION_CLASS:
            raise LocalProtocolError(f"{method.name} belongs on channel 0")
        record = self._channels.get(channel)
        if state is not ConnectionState.OPEN or record is None:
            return False
        if method.key == _CHANNEL_CLOSE_OK:
            return record.close_ok_due
        return record.state is ChannelState.OPEN

    def _sent(self, channel: int, method: Method) -> None:
        if channel == 0:
            if method.name == "connection.close":
                self.state = ConnectionState.CLOSING
            elif method.name == "connection.close-ok":
                self._peer_close_pending = False
                self._closed_cleanly = True
                self.state = ConnectionState.TERMINATED
            return
        record = self._channels[channel]
        if method.key == _CHANNEL_CLOSE:
            record.state = ChannelState.CLOSING
            record.assembler.reset()
        elif method.key == _CHANNEL_CLOSE_OK:
            record.close_ok_due = False
            if record.state is ChannelState.PEER_CLOSING:
                del self._channels[channel]    # the number is free; after crossed closes we await theirs

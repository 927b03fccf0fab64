"""What `AmqpServerConnection.receive_data` reports, in the order it happened.

Events with a `data` field carry bytes the machine itself decided to send (connection.start, our
protocol header, a channel.close or connection.close for an error it detected): write them in
event order. Everything else is answered, if at all, through the machine's send helpers.

Events are plain slots dataclasses, treated as immutable but not frozen: a frozen dataclass sets
each field through object.__setattr__, about 2 µs more per event, and one comes with every method.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from protocols.amqp.codec.properties import ContentProperties
from protocols.amqp.spec import METHODS_BY_NAME, Method


class Event:
    """Base class of everything receive_data returns."""

    __slots__ = ()


# --- handshake ------------------------------------------------------------------------------------

@dataclass(slots=True)
class ProtocolHeaderAccepted(Event):
    """The client sent AMQP 0-9-1's header; `data` is our connection.start."""
    data: bytes


@dataclass(slots=True)
class ProtocolHeaderRejected(Event):
    """Any other 8 bytes: write `data` (our protocol header) and close the socket."""
    received: bytes
    data: bytes


@dataclass(slots=True)
class AuthenticationRequested(Event):
    """start-ok arrived: check the credentials, then call accept_authentication() or
    refuse_authentication()."""
    mechanism: str
    username: str
    password: str
    client_properties: Mapping[str, Any]


@dataclass(slots=True)
class ConnectionTuned(Event):
    """tune-ok arrived and was within limits: these values are now in force."""
    channel_max: int
    frame_max: int
    heartbeat: int


@dataclass(slots=True)
class VhostOpenRequested(Event):
    """connection.open arrived: call accept_vhost() or refuse_vhost()."""
    vhost: str


# --- running connection ---------------------------------------------------------------------------

@dataclass(slots=True)
class MethodReceived(Event):
    """A complete method without content. Channel lifecycle methods come this way too:
    channel.open (answer channel.open-ok), channel.close (clean up, answer channel.close-ok),
    channel.close-ok (the answer to our channel.close: the channel number is free again), and on
    channel 0 connection.update-secret."""
    channel: int
    method_name: str
    args: Mapping[str, Any]

    @property
    def method(self) -> Method:
        return METHODS_BY_NAME[self.method_name]


@dataclass(slots=True)
class ContentReceived(Event):
    """A content-bearing method (basic.publish) with its header and whole body."""
    channel: int
    method_name: str
    args: Mapping[str, Any]
    properties: ContentProperties   # .raw as received; .decoded on demand (may raise DecodeError)
    body: bytes

    @property
    def method(self) -> Method:
        return METHODS_BY_NAME[self.method_name]


@dataclass(slots=True)
class HeartbeatReceived(Event):
    pass


@dataclass(slots=True)
class ChannelErrorRaised(Event):
    """The machine found a soft error on `channel` (a message over max_message_size): `data` is the
    channel.close; the channel ignores everything until the client's close-ok."""
    channel: int
    reply_code: int
    reply_text: str
    class_id: int
    method_id: int
    data: bytes


@dataclass(slots=True)
class ConnectionErrorRaised(Event):
    """The machine found a hard error: `data` is the connection.close. If `lost_sync` (broken
    framing), nothing more can be read: write `data` and close the socket. Otherwise the machine
    waits for close-ok (ConnectionClosed), which the caller should bound with a timeout."""
    reply_code: int
    reply_text: str
    class_id: int
    method_id: int
    data: bytes
    lost_sync: bool


@dataclass(slots=True)
class ConnectionCloseRequested(Event):
    """The client sent connection.close: clean up, send connection.close-ok, close the socket."""
    reply_code: int
    reply_text: str
    class_id: int
    method_id: int


@dataclass(slots=True)
class ConnectionClosed(Event):
    """The client's close-ok answered our connection.close: close the socket."""


@dataclass(slots=True)
class ConnectionLost(Event):
    """receive_data(b"") (EOF). `clean` when it came after the close handshake had finished."""
    clean: bool

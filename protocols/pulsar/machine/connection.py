"""One Pulsar client connection's protocol rules, server side, without I/O.

    conn = PulsarServerConnection(max_frame_bytes)
    for frame in conn.receive_data(chunk):     # raises ProtocolViolation: close the connection
        ...hand the frame to the handlers...
    conn.connected(...)                        # the bytes of CONNECTED, once CONNECT was accepted

It owns the framing limit (codec/frames.py), the handshake (the first command must be CONNECT, and
only one; nothing else is served before it), the protocol version both sides then speak (the
lower of the client's and ours), and the keep-alive bookkeeping: whether the peer has been heard
from since the last PING we sent, so the adapter can drop a silent connection as Pulsar does.
"""

from __future__ import annotations

from protocols.pulsar.codec.errors import DecodeError
from protocols.pulsar.codec.frames import Frame, FrameReader, decode_frame, encode_command
from protocols.pulsar.codec.pulsar_wire_pb2 import BaseCommand

# The newest protocol version the gateway speaks: the official clients of 3.x send 19 to 21, and
# nothing the gateway serves changed after 19 (20 adds broker-initiated topic migration, 21 a
# schema kind carried to the broker).
SERVER_PROTOCOL_VERSION = 19
SERVER_VERSION = "gateway-pulsar"


class ProtocolViolation(Exception):
    """The client broke the protocol: the connection is closed (logged once by the adapter)."""


class PulsarServerConnection:
    def __init__(self, max_frame_bytes: int) -> None:
        self._reader = FrameReader(max_frame_bytes)
        self.handshaken = False
        self.protocol_version = 0
        self.client_version = ""
        self.heard_since_ping = True

    def receive_data(self, data: bytes) -> list[Frame]:
        try:
            raw = self._reader.feed(data)
            frames = [decode_frame(frame) for frame in raw]
        except DecodeError as exc:
            raise ProtocolViolation(str(exc)) from None
        if raw:
            self.heard_since_ping = True
        for frame in frames:
            is_connect = frame.command.type == BaseCommand.CONNECT
            if is_connect == self.handshaken:
                raise ProtocolViolation("CONNECT sent twice" if is_connect else
                                        f"{BaseCommand.Type.Name(frame.command.type)} before CONNECT")
            if is_connect:
                self._accept_connect(frame.command.connect)
        return frames

    def _accept_connect(self, connect) -> None:
        self.handshaken = True
        self.client_version = connect.client_version
        self.protocol_version = min(max(connect.protocol_version, 0), SERVER_PROTOCOL_VERSION)

    def connected(self, max_message_size: int) -> bytes:
        command = BaseCommand(type=BaseCommand.CONNECTED)
        command.connected.server_version = SERVER_VERSION
        command.connected.protocol_version = self.protocol_version
        command.connected.max_message_size = max_message_size
        return encode_command(command)

    def ping(self) -> bytes:
        """A keep-alive probe; the caller closes the connection if the next one finds it unanswered."""
        self.heard_since_ping = False
        command = BaseCommand(type=BaseCommand.PING)
        command.ping.SetInParent()
        return encode_command(command)

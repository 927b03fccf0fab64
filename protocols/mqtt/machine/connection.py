"""One MQTT connection's protocol state, without I/O: bytes in, checked packets out, and packets
to bytes in the connection's protocol version.

It enforces what does not need the core: CONNECT first and only once, only the packets a client
may send, incoming topic aliases (5.0), the keep-alive deadline (one and a half times the
interval, as the specification asks), packet identifiers for outgoing QoS 1/2 publishes, and the
client's maximum packet size for what is sent to it.
"""

from __future__ import annotations

from collections.abc import Iterator

from protocols.mqtt.codec import packets as pk
from protocols.mqtt.codec.errors import DecodeError
from protocols.mqtt.codec.framing import Framer
from protocols.mqtt.machine import errors as rc
from protocols.mqtt.machine.errors import ConnectionEnded

_FROM_CLIENT = frozenset({pk.CONNECT, pk.PUBLISH, pk.PUBACK, pk.PUBREC, pk.PUBREL, pk.PUBCOMP, pk.SUBSCRIBE,
                          pk.UNSUBSCRIBE, pk.PINGREQ, pk.DISCONNECT, pk.AUTH})
PACKET_ID_MAX = 0xFFFF


class MqttMachine:
    def __init__(self, max_packet_bytes: int, topic_alias_maximum: int = 0) -> None:
        self._framer = Framer(max_packet_bytes)
        self.version: int | None = None           # the protocol level, once CONNECT came
        self.connected = False                     # CONNACK with success sent
        self.keep_alive_s = 0
        self.last_received = 0.0
        self.topic_alias_maximum = topic_alias_maximum
        self._aliases: dict[int, str] = {}
        self.client_max_packet_bytes: int | None = None
        self._next_packet_id = 1

    # --- input ------------------------------------------------------------------------------------

    def receive(self, data: bytes, now: float) -> Iterator[pk.Packet]:
        """The packets `data` completes, one at a time: each is decoded once the one before it was
        handled (a CONNECT sets the version the next is read with). ConnectionEnded where the
        bytes break the protocol, after the good packets before that point."""
        frames, error = self._framer.feed(data)
        if frames:
            self.last_received = now
        for first_byte, body in frames:
            packet_type = first_byte >> 4
            if self.version is None and packet_type != pk.CONNECT:
                raise ConnectionEnded(rc.PROTOCOL_ERROR, f"packet type {packet_type} before CONNECT")
            if packet_type not in _FROM_CLIENT:
                raise ConnectionEnded(rc.PROTOCOL_ERROR, f"packet type {packet_type} is not sent by clients")
            if packet_type == pk.CONNECT and self.version is not None:
                raise ConnectionEnded(rc.PROTOCOL_ERROR, "a second CONNECT")
            try:
                packet = pk.decode(first_byte, body, self.version or pk.V311)
            except DecodeError as exc:
                raise ConnectionEnded(exc.reason_code, str(exc)) from None
            if isinstance(packet, pk.Connect):
                self.version = packet.version
                self.keep_alive_s = packet.keep_alive
                self.client_max_packet_bytes = packet.properties.get("maximum_packet_size")
            elif isinstance(packet, pk.Publish) and self.version == pk.V5:
                self._resolve_alias(packet)
            yield packet
        if error is not None:
            raise ConnectionEnded(error.reason_code, str(error))

    def _resolve_alias(self, publish: pk.Publish) -> None:
        alias = publish.properties.pop("topic_alias", None)
        if alias is None:
            return
        if not 0 < alias <= self.topic_alias_maximum:
            raise ConnectionEnded(rc.TOPIC_ALIAS_INVALID, f"topic alias {alias} (maximum {self.topic_alias_maximum})")
        if publish.topic:
            self._aliases[alias] = publish.topic
        elif alias in self._aliases:
            publish.topic = self._aliases[alias]
        else:
            raise ConnectionEnded(rc.PROTOCOL_ERROR, f"topic alias {alias} used before it was set")

    def accepted(self, max_packet_bytes: int) -> None:
        """CONNACK with success is on its way: packets up to the full maximum size may come now."""
        self.connected = True
        self._framer.max_packet_bytes = max_packet_bytes

    def keep_alive_expired(self, now: float) -> bool:
        return self.keep_alive_s > 0 and now - self.last_received > 1.5 * self.keep_alive_s

    # --- output -----------------------------------------------------------------------------------

    def encode(self, packet: pk.Packet) -> bytes | None:
        """The packet's bytes; None for a packet over the client's maximum packet size (not sent)."""
        data = packet.encode(self.version or pk.V311)
        if self.client_max_packet_bytes is not None and len(data) > self.client_max_packet_bytes:
            return None
        return data

    def take_packet_id(self, in_use) -> int:
        """A packet identifier not in `in_use` (the caller keeps fewer than 65,535 in flight)."""
        candidate = self._next_packet_id
        while candidate in in_use:
            candidate = candidate % PACKET_ID_MAX + 1
        self._next_packet_id = candidate % PACKET_ID_MAX + 1
        return candidate

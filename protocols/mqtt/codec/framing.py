"""Cutting a byte stream into MQTT packets, bounded before anything is buffered.

A packet is one byte of type and flags, the remaining length (a variable byte integer of at most
four bytes) and that many bytes. The remaining length is checked against the maximum packet size
as soon as it is read, so a hostile length is refused before its body is waited for or stored; at
most one maximum-size packet is ever held per connection.
"""

from __future__ import annotations

from protocols.mqtt.codec.errors import PACKET_TOO_LARGE, DecodeError, malformed


class Framer:
    __slots__ = ("max_packet_bytes", "_buffer")

    def __init__(self, max_packet_bytes: int) -> None:
        self.max_packet_bytes = max_packet_bytes
        self._buffer = bytearray()

    def feed(self, data: bytes) -> tuple[list[tuple[int, bytes]], DecodeError | None]:
        """The complete packets `data` finishes, as (first byte, body), and the error of a bad frame
        after them (None: none). The packets before a bad frame are still served; nothing after it."""
        packets: list[tuple[int, bytes]] = []
        try:
            self._cut(data, packets)
        except DecodeError as exc:
            return packets, exc
        return packets, None

    def _cut(self, data: bytes, packets: list[tuple[int, bytes]]) -> None:
        buffer = self._buffer
        buffer += data
        position = 0
        end = len(buffer)
        while end - position >= 2:
            length, shift, cursor = 0, 0, position + 1
            while True:
                if cursor >= end:
                    length = -1      # the length itself is not complete yet
                    break
                byte = buffer[cursor]
                cursor += 1
                length |= (byte & 0x7F) << shift
                if not byte & 0x80:
                    break
                shift += 7
                if shift >= 28:
                    raise malformed("remaining length longer than four bytes")
            if length < 0:
                break
            total = cursor - position + length
            if total > self.max_packet_bytes:
                raise DecodeError(PACKET_TOO_LARGE,
                                  f"packet of {total} bytes over the limit of {self.max_packet_bytes}")
            if end - cursor < length:
                break
            packets.append((buffer[position], bytes(buffer[cursor:cursor + length])))
            position = cursor + length
        if position:
            del buffer[:position]

    @property
    def buffered(self) -> int:
        return len(self._buffer)

"""One Kafka request over a raw socket, encoded and decoded with the gateway's own codec: for APIs
and fields that no client library exposes (exact Fetch byte limits, leader epochs, raw timestamps)."""

from __future__ import annotations

import socket
import struct
import time

from protocols.kafka.codec import types as t
from protocols.kafka.codec.compile import request_codec, response_codec

TIMEOUT_S = 15.0


def raw_request(address: tuple[str, int], api, version: int, body: dict):
    """Send one request at `version` and return its decoded response."""
    payload = bytearray(struct.pack(">hhih", api.key, version, 1, len(b"raw")) + b"raw")
    if api.is_flexible(version):
        payload += b"\x00"   # request header v2: no tagged fields
    request_codec(api, version).write(payload, body)
    with socket.create_connection(address, timeout=TIMEOUT_S) as conn:
        conn.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", receive_exactly(conn, 4))[0]
        frame = receive_exactly(conn, size)
    reader = t.Reader(frame)
    assert reader.unpack(struct.Struct(">i")) == 1
    if api.is_flexible(version):
        assert reader.uvarint() == 0   # response header v1: no tagged fields
    return response_codec(api, version).read(reader)


def receive_exactly(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    deadline = time.monotonic() + TIMEOUT_S
    while len(data) < size and time.monotonic() < deadline:
        chunk = conn.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    assert len(data) == size, f"connection closed after {len(data)} of {size} bytes"
    return bytes(data)

"""The frames brokers of a cluster exchange on their peer links (core/cluster/peers.py). Pure codec:
bytes in, tuples out, and back; no sockets, no asyncio.

Every frame, both ways (big-endian):

    offset  size  field
    0       4     length        bytes after this field, 12 <= length <= MAX_FRAME_BYTES
                                (HANDSHAKE_FRAME_BYTES until the link is authenticated)
    4       8     request id    chosen by the asking broker; an answer carries its request's id
    12      4     head length   n, the bytes of the head
    16      n     head          a JSON object: a request's kind and fields, or an answer
                                ({"error": text, "retriable": bool} when refused)
    16+n    ...   payload       bytes the head describes (records), possibly none

The link starts with a shared-secret handshake (the cluster's [storage] secret, as bookies use;
the secret never crosses the wire): the listening broker sends request id 0 with {"nonce"}; the
connecting one answers id 0 with {"nonce", "proof"}, proof = HMAC-SHA256(secret, "peer" + listener
nonce + connector nonce); the listener answers id 0 with {"proof"} over the nonces the other way
round, or closes the link.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct

FRAME = struct.Struct(">IQI")           # length, request id, head length
MAX_FRAME_BYTES = 160 << 20          # a 128 MiB message (RabbitMQ's default limit) with room to spare
HANDSHAKE_FRAME_BYTES = 4096        # what an unauthenticated peer may make this broker read
NONCE_BYTES = 32


class FrameError(ValueError):
    """A frame that breaks the layout: the link is closed."""


def encode(request_id: int, head: dict, payload: bytes = b"") -> list[bytes]:
    head_bytes = json.dumps(head, separators=(",", ":")).encode()
    length = FRAME.size - 4 + len(head_bytes) + len(payload)
    if length > MAX_FRAME_BYTES:
        raise FrameError(f"a frame of {length} bytes is over the limit of {MAX_FRAME_BYTES}")
    return [FRAME.pack(length, request_id, len(head_bytes)), head_bytes, payload]


def frame_length(prefix: bytes, limit: int = MAX_FRAME_BYTES) -> int:
    """The bytes after the length field, from its first 4 bytes; FrameError when out of bounds."""
    (length,) = struct.unpack_from(">I", prefix)
    if not FRAME.size - 4 <= length <= limit:
        raise FrameError(f"frame length {length} out of bounds")
    return length


def decode(body: bytes) -> tuple[int, dict, bytes]:
    """(request id, head, payload) from a frame without its length field."""
    request_id, head_length = struct.unpack_from(">QI", body)
    start = FRAME.size - 4
    if head_length > len(body) - start:
        raise FrameError(f"head length {head_length} over the {len(body) - start} bytes left")
    try:
        head = json.loads(body[start:start + head_length])
    except ValueError as exc:
        raise FrameError(f"head is not JSON: {exc}") from None
    if not isinstance(head, dict):
        raise FrameError("head is not a JSON object")
    return request_id, head, body[start + head_length:]


def proof(secret: bytes, first_nonce: bytes, second_nonce: bytes) -> str:
    return hmac.new(secret, b"peer" + first_nonce + second_nonce, hashlib.sha256).hexdigest()


def proof_matches(secret: bytes, first_nonce: bytes, second_nonce: bytes, received: object) -> bool:
    return isinstance(received, str) and hmac.compare_digest(proof(secret, first_nonce, second_nonce), received)

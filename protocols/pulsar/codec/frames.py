"""Pulsar's framing: commands, and commands that carry a message, in and out of bytes.

Every frame on the wire (all integers big-endian):

    total_size     u32   bytes after this field
    command_size   u32
    command        BaseCommand (protobuf), command_size bytes
    -- only a payload command (SEND, MESSAGE) goes on: --
    magic          u16   0x0e01
    checksum       u32   CRC-32C of everything after it
    metadata_size  u32
    metadata       MessageMetadata (protobuf)
    payload        the rest of the frame (one message, or a batch: codec/batch.py)

A broker may put [u16 0x0e02][u32 size][BrokerEntryMetadata] before the magic; the gateway never
sends it (it does not announce the feature) and skips it if a client does.

`FrameReader` is bounded: a frame is refused from its size field, before it is buffered, when it
is larger than the limit (Pulsar's max message size plus room for the command), and every size
inside a frame is checked against the bytes the frame really has.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c
from google.protobuf.message import DecodeError as ProtobufDecodeError

from protocols.pulsar.codec.errors import DecodeError
from protocols.pulsar.codec.pulsar_wire_pb2 import BaseCommand, MessageMetadata

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02
DEFAULT_MAX_MESSAGE_BYTES = 5 * 1024 * 1024   # Pulsar's maxMessageSize default
FRAME_PADDING = 10 * 1024                     # room for the command and metadata around a message

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_TWO_U32 = struct.Struct(">II")
_BODY_FIELDS = {number: field.name for number, field in BaseCommand.DESCRIPTOR.fields_by_number.items() if number != 1}


@dataclass(slots=True)
class Frame:
    """One decoded frame: its command, and for a payload command its metadata and payload."""

    command: BaseCommand
    metadata: MessageMetadata | None = None
    payload: bytes = b""
    checksum_ok: bool = True     # False: the payload's CRC-32C did not match (the command still stands)


# --- writing ---------------------------------------------------------------------------------------

def encode_command(command: BaseCommand) -> bytes:
    body = command.SerializeToString()
    return _TWO_U32.pack(len(body) + 4, len(body)) + body


def encode_payload_command(command: BaseCommand, metadata: MessageMetadata | bytes, payload: bytes) -> bytes:
    """A command carrying a message; `metadata` may come serialized already (a delivery reuses it)."""
    body = command.SerializeToString()
    meta = metadata if isinstance(metadata, bytes) else metadata.SerializeToString()
    checked = _U32.pack(len(meta)) + meta + payload
    checksum = crc32c.crc32c(checked)
    total = 4 + len(body) + 2 + 4 + len(checked)
    return b"".join((_TWO_U32.pack(total, len(body)), body, _U16.pack(MAGIC_CRC32C), _U32.pack(checksum), checked))


# --- reading ---------------------------------------------------------------------------------------

def decode_frame(frame: bytes | memoryview) -> Frame:
    """One frame without its total-size field (what FrameReader hands out)."""
    view = memoryview(frame)
    if len(view) < 4:
        raise DecodeError("frame shorter than its command size field")
    (command_size,) = _U32.unpack_from(view, 0)
    if command_size > len(view) - 4:
        raise DecodeError(f"command size {command_size} runs past the frame ({len(view) - 4} bytes left)")
    command = BaseCommand()
    try:
        command.ParseFromString(view[4:4 + command_size])
    except (ProtobufDecodeError, RuntimeWarning, ValueError) as exc:
        raise DecodeError(f"command does not parse: {exc}") from None
    if not command.IsInitialized():   # an unknown type, or a command without its required fields
        raise DecodeError(f"command lacks {', '.join(command.FindInitializationErrors())}")
    body = _BODY_FIELDS.get(command.type)    # each command's body is the field numbered as its type
    if body is not None and not command.HasField(body):
        raise DecodeError(f"{BaseCommand.Type.Name(command.type)} without its body")
    rest = view[4 + command_size:]
    if not rest:
        return Frame(command)
    return _with_payload(command, rest)


def _with_payload(command: BaseCommand, rest: memoryview) -> Frame:
    if len(rest) >= 2 and _U16.unpack_from(rest, 0)[0] == MAGIC_BROKER_ENTRY_METADATA:
        if len(rest) < 6:
            raise DecodeError("broker entry metadata cut short")
        (size,) = _U32.unpack_from(rest, 2)
        if size > len(rest) - 6:
            raise DecodeError("broker entry metadata runs past the frame")
        rest = rest[6 + size:]
    if len(rest) < 10:
        raise DecodeError("payload command too short for its magic, checksum and metadata size")
    (magic,) = _U16.unpack_from(rest, 0)
    if magic != MAGIC_CRC32C:
        raise DecodeError(f"unknown payload magic {magic:#06x}")
    (checksum,) = _U32.unpack_from(rest, 2)
    checked = rest[6:]
    (metadata_size,) = _U32.unpack_from(checked, 0)
    if metadata_size > len(checked) - 4:
        raise DecodeError(f"metadata size {metadata_size} runs past the frame")
    checksum_ok = crc32c.crc32c(checked) == checksum
    metadata = MessageMetadata()
    try:
        metadata.ParseFromString(checked[4:4 + metadata_size])
    except (ProtobufDecodeError, RuntimeWarning, ValueError) as exc:
        if not checksum_ok:    # the corruption the checksum already found
            return Frame(command, None, b"", checksum_ok=False)
        raise DecodeError(f"message metadata does not parse: {exc}") from None
    if checksum_ok and not metadata.IsInitialized():
        raise DecodeError(f"message metadata lacks {', '.join(metadata.FindInitializationErrors())}")
    return Frame(command, metadata, bytes(checked[4 + metadata_size:]), checksum_ok)


class FrameReader:
    """Splits a byte stream into frames, refusing an oversized one before buffering it."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_MESSAGE_BYTES + FRAME_PADDING) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """The whole frames `data` completes (each without its total-size field)."""
        buffer = self._buffer
        buffer += data
        frames = []
        start = 0
        while len(buffer) - start >= 4:
            (size,) = _U32.unpack_from(buffer, start)
            if size > self.max_frame_bytes:
                raise DecodeError(f"frame of {size} bytes exceeds the limit of {self.max_frame_bytes}")
            if size < 4:
                raise DecodeError(f"frame of {size} bytes cannot hold its command size")
            if len(buffer) - start - 4 < size:
                break
            frames.append(bytes(buffer[start + 4:start + 4 + size]))
            start += 4 + size
        if start:
            del buffer[:start]
        return frames

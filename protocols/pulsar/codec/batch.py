"""A message payload as its messages: one message, or a batch of them.

A batch (MessageMetadata.num_messages_in_batch present) is, after decompression, a run of

    size       u32   of the SingleMessageMetadata after it
    metadata   SingleMessageMetadata (protobuf): payload_size, properties, keys, event time...
    payload    payload_size bytes

`unpack` returns one `Message` per message with what the gateway stores: key, value, properties,
event time, ordering key and sequence id, whether it came from a batch or not. Every size is
checked against the bytes left, and the batch must be used up exactly.
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass

from google.protobuf.message import DecodeError as ProtobufDecodeError

from protocols.pulsar.codec.compression import compress, decompress
from protocols.pulsar.codec.errors import DecodeError
from protocols.pulsar.codec.pulsar_wire_pb2 import NONE, KeyValue, MessageMetadata, SingleMessageMetadata

_U32 = struct.Struct(">I")


@dataclass(slots=True)
class Message:
    value: bytes | None
    key: bytes | None = None             # the partition key (decoded from base64 where flagged)
    ordering_key: bytes | None = None
    properties: tuple[tuple[str, str], ...] = ()
    event_time: int = 0                  # 0: not set
    sequence_id: int | None = None       # a batched message's own, where the producer set it


def unpack(metadata: MessageMetadata, payload: bytes, max_bytes: int) -> list[Message]:
    body = decompress(metadata.compression, payload, metadata.uncompressed_size, max_bytes)
    if not metadata.HasField("num_messages_in_batch"):
        return [Message(None if metadata.null_value else body, _key(metadata), _ordering_key(metadata),
                        _properties(metadata.properties), metadata.event_time)]
    count = metadata.num_messages_in_batch
    if count < 1:
        raise DecodeError(f"a batch of {count} messages")
    messages = []
    view = memoryview(body)
    pos = 0
    for _ in range(count):
        if len(view) - pos < 4:
            raise DecodeError("batch cut short before a message's metadata size")
        (size,) = _U32.unpack_from(view, pos)
        pos += 4
        if size > len(view) - pos:
            raise DecodeError(f"single-message metadata of {size} bytes runs past the batch")
        single = SingleMessageMetadata()
        try:
            single.ParseFromString(view[pos:pos + size])
        except (ProtobufDecodeError, RuntimeWarning, ValueError) as exc:
            raise DecodeError(f"single-message metadata does not parse: {exc}") from None
        if not single.IsInitialized():
            raise DecodeError("single-message metadata lacks its payload size")
        pos += size
        if not 0 <= single.payload_size <= len(view) - pos:
            raise DecodeError(f"message payload of {single.payload_size} bytes runs past the batch")
        value = bytes(view[pos:pos + single.payload_size])
        pos += single.payload_size
        if single.compacted_out:
            continue
        messages.append(Message(None if single.null_value else value, _key(single), _ordering_key(single),
                                _properties(single.properties), single.event_time,
                                single.sequence_id if single.HasField("sequence_id") else None))
    if pos != len(view):
        raise DecodeError(f"{len(view) - pos} bytes left over after the batch's {count} messages")
    return messages


def pack(messages: list[Message], compression: int = NONE) -> tuple[bytes, int]:
    """A batch payload of `messages` (the writer's side, for tests and tools): (payload, uncompressed size)."""
    parts = []
    for message in messages:
        single = SingleMessageMetadata(payload_size=len(message.value or b""), event_time=message.event_time)
        if message.value is None:
            single.null_value = True
        if message.key is not None:
            _set_key(single, message.key)
        if message.ordering_key is not None:
            single.ordering_key = message.ordering_key
        if message.sequence_id is not None:
            single.sequence_id = message.sequence_id
        single.properties.extend(KeyValue(key=k, value=v) for k, v in message.properties)
        encoded = single.SerializeToString()
        parts += (_U32.pack(len(encoded)), encoded, message.value or b"")
    body = b"".join(parts)
    return compress(compression, body), len(body)


def _set_key(metadata: MessageMetadata | SingleMessageMetadata, key: bytes) -> None:
    try:
        metadata.partition_key = key.decode("utf-8")
    except UnicodeDecodeError:
        metadata.partition_key = base64.b64encode(key).decode("ascii")
        metadata.partition_key_b64_encoded = True


def set_key(metadata: MessageMetadata, key: bytes) -> None:
    """Put a record's key into the metadata as Pulsar's partition key (base64 where not UTF-8)."""
    _set_key(metadata, key)


def _key(metadata: MessageMetadata | SingleMessageMetadata) -> bytes | None:
    if not metadata.HasField("partition_key") or metadata.null_partition_key:
        return None
    if metadata.partition_key_b64_encoded:
        try:
            return base64.b64decode(metadata.partition_key, validate=True)
        except binascii.Error:
            raise DecodeError("partition key flagged base64 is not base64") from None
    return metadata.partition_key.encode("utf-8")


def _ordering_key(metadata: MessageMetadata | SingleMessageMetadata) -> bytes | None:
    return metadata.ordering_key if metadata.HasField("ordering_key") else None


def _properties(properties) -> tuple[tuple[str, str], ...]:
    return tuple((p.key, p.value) for p in properties)

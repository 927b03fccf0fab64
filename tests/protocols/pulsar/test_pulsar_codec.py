"""Pulsar's framing, message payloads and batches: round trips, golden bytes, and bad input refused."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.pulsar.codec.batch import Message, pack, unpack
from protocols.pulsar.codec.compression import CODECS, compress, decompress
from protocols.pulsar.codec.errors import DecodeError
from protocols.pulsar.codec.frames import (
    FrameReader,
    decode_frame,
    encode_command,
    encode_payload_command,
)
from protocols.pulsar.codec.pulsar_wire_pb2 import LZ4, NONE, ZLIB, BaseCommand, MessageMetadata

# CONNECT as the official client (pulsar-client 3.x, its C++ library 4.2.0) sends it, from a capture.
CLIENT_CONNECT = bytes.fromhex(
    "0000002900000025080212210a1150756c7361722d4350502d76342e322e3020142a046e6f6e65520408011001")
# PING, worked out by hand from the protocol: sizes 9 and 5, type 18, an empty field 18.
PING = bytes.fromhex("00000009000000050812920100")


def _one_frame(data: bytes):
    frames = FrameReader().feed(data)
    assert len(frames) == 1
    return decode_frame(frames[0])


def test_the_official_clients_connect_decodes():
    connect = _one_frame(CLIENT_CONNECT).command
    assert connect.type == BaseCommand.CONNECT
    assert connect.connect.client_version == "Pulsar-CPP-v4.2.0"
    assert connect.connect.protocol_version == 20
    assert connect.connect.auth_method_name == "none"


def test_ping_encodes_to_the_protocols_bytes():
    command = BaseCommand(type=BaseCommand.PING)
    command.ping.SetInParent()
    assert encode_command(command) == PING
    assert _one_frame(PING).command.type == BaseCommand.PING


def _send(sequence_id: int) -> BaseCommand:
    command = BaseCommand(type=BaseCommand.SEND)
    command.send.producer_id = 7
    command.send.sequence_id = sequence_id
    return command


def _metadata(**fields) -> MessageMetadata:
    return MessageMetadata(producer_name="p", sequence_id=fields.pop("sequence_id", 0), publish_time=1, **fields)


@given(payload=st.binary(max_size=2048), sequence_id=st.integers(0, 2**64 - 1),
       chunks=st.integers(1, 7))
@settings(max_examples=60, deadline=None)
def test_payload_commands_round_trip_however_the_bytes_arrive(payload, sequence_id, chunks):
    wire = encode_payload_command(_send(sequence_id), _metadata(sequence_id=sequence_id), payload)
    reader = FrameReader()
    step = max(1, len(wire) // chunks)
    frames = []
    for start in range(0, len(wire), step):
        frames += reader.feed(wire[start:start + step])
    assert len(frames) == 1 and reader.buffered == 0
    frame = decode_frame(frames[0])
    assert frame.checksum_ok
    assert frame.command.send.sequence_id == sequence_id
    assert frame.metadata.sequence_id == sequence_id
    assert frame.payload == payload


def test_a_flipped_payload_bit_fails_the_checksum_but_keeps_the_command():
    wire = bytearray(encode_payload_command(_send(3), _metadata(), b"hello"))
    wire[-1] ^= 0x01
    frame = _one_frame(bytes(wire))
    assert not frame.checksum_ok
    assert frame.command.send.sequence_id == 3


def test_the_checksum_is_crc32c_of_metadata_size_metadata_and_payload():
    metadata = _metadata()
    wire = encode_payload_command(_send(1), metadata, b"xyz")
    (command_size,) = struct.unpack_from(">I", wire, 4)
    after = 8 + command_size
    assert wire[after:after + 2] == b"\x0e\x01"
    (checksum,) = struct.unpack_from(">I", wire, after + 2)
    assert checksum == crc32c.crc32c(wire[after + 6:])


@given(messages=st.lists(st.builds(
    Message,
    value=st.one_of(st.none(), st.binary(max_size=64)),
    key=st.one_of(st.none(), st.binary(max_size=16)),
    ordering_key=st.one_of(st.none(), st.binary(max_size=8)),
    properties=st.lists(st.tuples(st.text(max_size=8), st.text(max_size=8)), max_size=3).map(tuple),
    event_time=st.integers(0, 2**40),
    sequence_id=st.one_of(st.none(), st.integers(0, 2**63)),
), min_size=1, max_size=20), codec=st.sampled_from(CODECS))
@settings(max_examples=60, deadline=None)
def test_batches_round_trip_with_every_compression(messages, codec):
    payload, size = pack(messages, codec)
    metadata = _metadata(num_messages_in_batch=len(messages), compression=codec, uncompressed_size=size)
    assert unpack(metadata, payload, max_bytes=1 << 20) == messages


def test_a_single_message_keeps_key_properties_and_null_value():
    metadata = _metadata(partition_key="k", null_value=True)
    metadata.properties.add(key="a", value="b")
    [message] = unpack(metadata, b"", max_bytes=100)
    assert (message.value, message.key, message.properties) == (None, b"k", (("a", "b"),))


@pytest.mark.parametrize("codec", [c for c in CODECS if c != NONE])
def test_decompression_refuses_a_size_over_the_limit_before_decompressing(codec):
    data = compress(codec, b"a" * 1000)
    with pytest.raises(DecodeError, match="over the"):
        decompress(codec, data, 1000, max_bytes=999)


@pytest.mark.parametrize("codec", [c for c in CODECS if c != NONE])
def test_decompression_refuses_a_wrong_declared_size_and_garbage(codec):
    data = compress(codec, b"abc" * 100)
    with pytest.raises(DecodeError):
        decompress(codec, data, 299, max_bytes=1000)
    with pytest.raises(DecodeError):
        decompress(codec, b"\xff\x00garbage\x13" * 3, 50, max_bytes=1000)


def test_an_oversized_frame_is_refused_from_its_size_field_alone():
    reader = FrameReader(max_frame_bytes=1000)
    with pytest.raises(DecodeError, match="exceeds"):
        reader.feed(struct.pack(">I", 1001))


@pytest.mark.parametrize("frame", [
    b"\x00\x00\x00\x10",                                   # command size past the frame
    b"\x00\x00\x00\x02\x08\x63",                           # an unknown command type
    b"\x00\x00\x00\x02\x08\x05",                           # PRODUCER without its fields
    b"\x00\x00\x00\x02\xff\xff",                           # not protobuf
], ids=["size", "unknown-type", "missing-fields", "garbage"])
def test_bad_commands_raise_decode_error(frame):
    with pytest.raises(DecodeError):
        decode_frame(frame)


def test_a_batch_whose_sizes_run_past_its_payload_is_refused():
    payload, size = pack([Message(b"x" * 10)])
    metadata = _metadata(num_messages_in_batch=2, uncompressed_size=size)
    with pytest.raises(DecodeError):
        unpack(metadata, payload, max_bytes=1000)


@given(st.binary(max_size=300))
@settings(max_examples=200, deadline=None)
def test_garbage_never_raises_anything_but_decode_error(data):
    try:
        for frame in FrameReader(max_frame_bytes=4096).feed(data):
            decoded = decode_frame(frame)
            if decoded.metadata is not None:
                unpack(decoded.metadata, decoded.payload, max_bytes=4096)
    except DecodeError:
        pass


def test_zlib_and_lz4_are_pulsars_formats():
    # zlib: a zlib stream (not gzip, not raw deflate); lz4: one raw block without a size prefix
    assert compress(ZLIB, b"abc")[:1] == b"\x78"
    import lz4.block
    assert lz4.block.decompress(compress(LZ4, b"abcabc"), uncompressed_size=6) == b"abcabc"

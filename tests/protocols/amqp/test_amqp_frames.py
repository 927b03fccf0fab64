"""Frames: parsed from any split of the input, size checked before buffering, end octet checked."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.amqp.codec.errors import DecodeError
from protocols.amqp.codec.frames import HEARTBEAT_FRAME, Frame, FrameReader, encode_frame
from protocols.amqp.spec import FRAME_BODY, FRAME_HEARTBEAT, FRAME_METHOD, ReplyCode

STREAM = [Frame(FRAME_METHOD, 0, b"\x00\x0a\x00\x0b"), Frame(FRAME_BODY, 7, b"x" * 300),
          Frame(FRAME_HEARTBEAT, 0, b""), Frame(FRAME_BODY, 65535, b"")]
WIRE = b"".join(encode_frame(f.type, f.channel, f.payload) for f in STREAM)


def test_a_frame_is_type_channel_size_payload_and_end_octet():
    assert encode_frame(FRAME_BODY, 3, b"ab") == b"\x03\x00\x03\x00\x00\x00\x02ab\xce"
    assert HEARTBEAT_FRAME == b"\x08\x00\x00\x00\x00\x00\x00\xce"


@pytest.mark.parametrize("cut", range(len(WIRE) + 1))
def test_frames_split_at_any_byte_boundary_come_out_whole_and_in_order(cut):
    reader = FrameReader()
    reader.feed(WIRE[:cut])
    got = list(reader.frames())
    reader.feed(WIRE[cut:])
    got += list(reader.frames())
    assert got == STREAM
    assert reader.buffered == 0


def test_frames_fed_one_byte_at_a_time_come_out_whole():
    reader = FrameReader()
    got = []
    for index in range(len(WIRE)):
        reader.feed(WIRE[index:index + 1])
        got += reader.frames()
    assert got == STREAM


@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(0, len(WIRE)), max_size=8))
def test_frames_fed_in_arbitrary_chunks_come_out_whole(cuts):
    reader = FrameReader()
    got = []
    bounds = [0, *sorted(cuts), len(WIRE)]
    for start, end in zip(bounds, bounds[1:]):
        reader.feed(WIRE[start:end])
        got += reader.frames()
    assert got == STREAM


def test_an_oversized_frame_is_refused_from_its_header_before_the_payload_arrives():
    reader = FrameReader(frame_max=4096)
    reader.feed(b"\x03\x00\x01" + (4097).to_bytes(4, "big"))   # seven header bytes, no payload yet
    with pytest.raises(DecodeError, match="over the negotiated frame_max 4096") as caught:
        reader.next_frame()
    assert caught.value.reply_code == ReplyCode.FRAME_ERROR
    assert reader.buffered == 0


def test_a_payload_of_exactly_frame_max_is_tolerated_as_rabbitmq_does():
    reader = FrameReader(frame_max=4096)
    reader.feed(encode_frame(FRAME_BODY, 1, b"x" * 4096))
    assert reader.next_frame() == Frame(FRAME_BODY, 1, b"x" * 4096)


def test_frame_max_zero_means_no_limit():
    reader = FrameReader(frame_max=0)
    reader.feed(encode_frame(FRAME_BODY, 1, b"x" * 100_000))
    assert len(reader.next_frame().payload) == 100_000


def test_a_wrong_end_octet_is_a_frame_error_and_the_reader_stays_failed():
    reader = FrameReader()
    reader.feed(b"\x08\x00\x00\x00\x00\x00\x00\xcd")
    with pytest.raises(DecodeError, match="ends with 0xcd") as caught:
        reader.next_frame()
    assert caught.value.reply_code == ReplyCode.FRAME_ERROR
    with pytest.raises(DecodeError, match="ends with 0xcd"):
        reader.feed(HEARTBEAT_FRAME)


def test_an_incomplete_frame_waits_for_more_bytes():
    reader = FrameReader()
    reader.feed(HEARTBEAT_FRAME[:-1])
    assert reader.next_frame() is None
    assert reader.buffered == 7

"""Content headers: the 14 basic properties by flag bit, and raw bytes kept for pass-through."""

from __future__ import annotations

import pytest
from amqp_strategies import basic_properties
from hypothesis import given, settings

from protocols.amqp.codec.errors import DecodeError
from protocols.amqp.codec.field_table import Int32
from protocols.amqp.codec.properties import (
    BasicProperties, ContentProperties, decode_content_header, encode_content_header,
)
from protocols.amqp.spec import BASIC_PROPERTIES, ReplyCode

ALL_SET = BasicProperties(
    content_type="text/plain", content_encoding="gzip", headers={"x-retries": Int32(3), "tags": ["a", "b"]},
    delivery_mode=2, priority=9, correlation_id="corr", reply_to="amq.rabbitmq.reply-to", expiration="60000",
    message_id="m-1", timestamp=1700000000, type="order.created", user_id="guest", app_id="shop",
    cluster_id="legacy",
)


def test_all_fourteen_properties_round_trip_with_every_flag_bit_set():
    raw = ALL_SET.encode()
    assert raw[:2] == b"\xff\xfc"     # bits 15..2 set, continuation bit clear
    assert BasicProperties.decode(raw) == ALL_SET


@pytest.mark.parametrize("index, prop", list(enumerate(BASIC_PROPERTIES)), ids=lambda p: getattr(p, "name", p))
def test_each_property_sets_its_own_flag_bit(index, prop):
    value = {"shortstr": "v", "table": {}, "octet": 1, "timestamp": 2}[prop.domain]
    raw = BasicProperties(**{prop.attr: value}).encode()
    assert int.from_bytes(raw[:2], "big") == 1 << (15 - index)
    assert getattr(BasicProperties.decode(raw), prop.attr) == value


@settings(max_examples=100, deadline=None)
@given(properties=basic_properties())
def test_any_combination_of_properties_round_trips(properties):
    raw = properties.encode()
    assert BasicProperties.decode(raw) == properties
    assert BasicProperties.decode(raw).encode() == raw


def test_no_properties_is_two_zero_flag_octets():
    assert BasicProperties().encode() == b"\x00\x00"
    assert BasicProperties.decode(b"\x00\x00") == BasicProperties()


def test_a_content_header_keeps_the_raw_property_bytes_and_decodes_them_on_demand():
    payload = encode_content_header(1234, ALL_SET)
    header = decode_content_header(payload)
    assert (header.class_id, header.weight, header.body_size) == (60, 0, 1234)
    assert header.properties.raw == ALL_SET.encode()
    assert header.properties.decoded == ALL_SET
    # pass-through: the raw bytes go back out unchanged, without decoding
    assert encode_content_header(1234, header.properties) == payload


def test_undecodable_raw_properties_pass_through_untouched_and_fail_only_when_decoded():
    garbage = ContentProperties(b"\x80\x00\x05ab")   # content-type claims 5 bytes, 2 follow
    assert encode_content_header(0, garbage).endswith(b"\x80\x00\x05ab")
    with pytest.raises(DecodeError) as caught:
        garbage.decoded
    assert caught.value.reply_code == ReplyCode.FRAME_ERROR


def test_continuation_flag_words_and_reserved_bits_are_skipped_as_rabbitmq_does():
    raw = b"\x80\x03" + b"\x00\x00" + b"\x01x"   # content-type, bit 1, continuation, then an empty word
    assert BasicProperties.decode(raw).content_type == "x"


def test_bytes_after_the_last_property_are_a_frame_error():
    with pytest.raises(DecodeError, match="after the last property"):
        BasicProperties.decode(b"\x00\x00\x00")


def test_a_content_header_shorter_than_its_fixed_fields_is_a_frame_error():
    with pytest.raises(DecodeError, match="too short"):
        decode_content_header(b"\x00\x3c\x00\x00" + b"\x00" * 8)


def test_present_lists_only_the_set_properties():
    assert BasicProperties(priority=0, app_id="a").present() == {"priority": 0, "app_id": "a"}

"""Method payloads: every method of the spec round-trips; bits pack; lengths are bounded."""

from __future__ import annotations

import pytest
from amqp_strategies import method_args
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols.amqp.codec.errors import DecodeError
from protocols.amqp.codec.methods import _CODECS, _field_by_field, decode_method, encode_method
from protocols.amqp.spec import METHODS, ReplyCode, method


@pytest.mark.parametrize("declared", METHODS, ids=lambda m: m.name)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_method_round_trips_through_encode_and_decode(declared, data):
    args = data.draw(method_args(declared))
    payload = encode_method(declared, args)
    decoded_method, decoded = decode_method(payload)
    assert decoded_method is declared
    assert decoded == args
    assert encode_method(declared, decoded) == payload


@pytest.mark.parametrize("declared", [m for m in METHODS if m.fields], ids=lambda m: m.name)
def test_every_truncation_of_a_method_payload_is_a_frame_error(declared):
    payload = encode_method(declared, {f.attr: _sample(f.domain) for f in declared.fields})
    for cut in range(len(payload)):
        with pytest.raises(DecodeError) as caught:
            decode_method(payload[:cut])
        assert caught.value.reply_code == ReplyCode.FRAME_ERROR


def _sample(domain):
    return {"octet": 7, "short": 300, "long": 70000, "longlong": 2**40, "timestamp": 5, "bit": True,
            "shortstr": "abc", "longstr": b"xyz", "table": {"k": 1}}[domain]


def test_consecutive_bits_share_one_octet_lowest_bit_first():
    payload = encode_method("queue.declare", queue="q", passive=True, durable=False, exclusive=True,
                            auto_delete=False, nowait=True)
    # class 50, method 10, ticket 0, shortstr "q", bits 0b10101, empty table
    assert payload == b"\x00\x32\x00\x0a" + b"\x00\x00" + b"\x01q" + bytes([0b10101]) + b"\x00\x00\x00\x00"


def test_bits_separated_by_other_fields_use_separate_octets():
    payload = encode_method("basic.deliver", consumer_tag="c", delivery_tag=1, redelivered=True, exchange="",
                            routing_key="r")
    assert payload == (b"\x00\x3c\x00\x3c" + b"\x01c" + (1).to_bytes(8, "big") + b"\x01" + b"\x00" + b"\x01r")


def test_leaving_out_a_defaulted_argument_uses_the_spec_default():
    assert encode_method("basic.publish", routing_key="rk") == encode_method(
        "basic.publish", ticket=0, exchange="", routing_key="rk", mandatory=False, immediate=False)


def test_missing_required_or_unknown_arguments_are_type_errors():
    with pytest.raises(TypeError, match="needs argument"):
        encode_method("basic.deliver", consumer_tag="c")
    with pytest.raises(TypeError, match="has no argument"):
        encode_method("basic.qos", prefetch=3)


def test_a_shortstr_over_255_bytes_cannot_be_encoded():
    with pytest.raises(ValueError, match="shortstr is 256 bytes"):
        encode_method("queue.declare", queue="q" * 256)
    assert decode_method(encode_method("queue.declare", queue="q" * 255))[1]["queue"] == "q" * 255


def test_out_of_range_integers_cannot_be_encoded():
    with pytest.raises(ValueError, match="does not fit"):
        encode_method("basic.qos", prefetch_count=70000)


def test_trailing_bytes_after_the_last_field_are_a_frame_error():
    payload = encode_method("basic.ack", delivery_tag=1)
    with pytest.raises(DecodeError, match="left over") as caught:
        decode_method(payload + b"\x00")
    assert caught.value.reply_code == ReplyCode.FRAME_ERROR


def test_a_length_prefix_longer_than_the_payload_is_a_frame_error():
    # queue.declare with a shortstr claiming 200 bytes but carrying 1
    payload = b"\x00\x32\x00\x0a\x00\x00" + b"\xc8q"
    with pytest.raises(DecodeError, match="needs 200 bytes"):
        decode_method(payload)


def test_an_unknown_method_id_is_a_frame_error():
    with pytest.raises(DecodeError, match="unknown method 60.99"):
        decode_method(b"\x00\x3c\x00\x63")


def test_malformed_utf8_in_a_shortstr_of_a_contentless_method_is_a_frame_error():
    payload = b"\x00\x32\x00\x0a\x00\x00" + b"\x02\xff\xfe" + b"\x00" + b"\x00\x00\x00\x00"
    with pytest.raises(DecodeError, match="malformed UTF-8") as caught:
        decode_method(payload)
    assert caught.value.reply_code == ReplyCode.FRAME_ERROR


def test_shortstrs_of_content_methods_are_not_checked_and_survive_any_bytes():
    payload = b"\x00\x3c\x00\x28\x00\x00" + b"\x02\xff\xfe" + b"\x01k" + b"\x00"
    decoded = decode_method(payload)[1]
    assert decoded["routing_key"] == "k"
    assert encode_method(method("basic.publish"), decoded) == payload


STRAIGHT_LINE = [codec for codec in _CODECS.values() if codec.straight is not None]


def test_the_generated_decoders_cover_the_hot_methods():
    assert {"basic.publish", "basic.deliver", "basic.get-ok", "basic.return"} <= {c.method.name for c in STRAIGHT_LINE}


@pytest.mark.parametrize("codec", STRAIGHT_LINE, ids=lambda c: c.method.name)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_generated_decoder_reads_what_the_field_reader_reads_and_refuses_the_rest(codec, data):
    """On any bytes: the same arguments as the field-by-field reader, or None where that one raises
    (decode_arguments then lets it raise, so errors stay the field reader's)."""
    if data.draw(st.booleans()):
        args = data.draw(method_args(codec.method))
        payload = bytearray(encode_method(codec.method, args))
        for _ in range(data.draw(st.integers(0, 3))):      # damage some bytes, or none
            if len(payload) > 4:
                payload[data.draw(st.integers(4, len(payload) - 1))] = data.draw(st.integers(0, 255))
        payload = bytes(payload[:data.draw(st.integers(4, len(payload) + 1))])
    else:
        payload = codec.prefix + data.draw(st.binary(max_size=40))
    fast = codec.straight(payload, 4)
    try:
        careful = _field_by_field(codec, payload, 4)
    except DecodeError:
        assert fast is None
    else:
        assert fast == careful and list(fast) == list(careful)

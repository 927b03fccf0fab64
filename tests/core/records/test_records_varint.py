import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.records.varint import (
    MalformedVarint,
    _encode_unsigned,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (300, b"\xd8\x04"),
    ],
)
def test_known_encodings(value, encoded):
    assert encode_varint(value) == encoded
    assert encode_varlong(value) == encoded
    assert decode_varint(encoded) == (value, len(encoded))


def test_the_one_and_two_byte_tables_agree_with_the_encoding_loop_and_the_decoder():
    for value in range(-8192, 8192):
        zigzag = (value << 1) ^ (value >> 63)
        assert encode_varint(value) == encode_varlong(value) == _encode_unsigned(zigzag)
        assert decode_varint(encode_varint(value)) == (value, 1 if -64 <= value < 64 else 2)
    assert len(encode_varint(8192)) == len(encode_varint(-8193)) == 3


@settings(max_examples=300)
@given(INT32, st.binary(max_size=4))
def test_varint_round_trip_stops_at_its_own_end(value, tail):
    encoded = encode_varint(value)
    assert len(encoded) <= 5
    assert decode_varint(b"\xaa" + encoded + tail, 1) == (value, 1 + len(encoded))


@settings(max_examples=300)
@given(INT64)
def test_varlong_round_trip(value):
    encoded = encode_varlong(value)
    assert len(encoded) <= 10
    assert decode_varlong(encoded) == (value, len(encoded))


def test_extremes_use_the_full_width():
    assert len(encode_varint(-(2**31))) == 5
    assert len(encode_varlong(2**63 - 1)) == 10


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1])
def test_encode_rejects_values_outside_int32(value):
    with pytest.raises(ValueError, match="int32"):
        encode_varint(value)


def test_encode_rejects_values_outside_int64():
    with pytest.raises(ValueError, match="int64"):
        encode_varlong(2**63)


@pytest.mark.parametrize(
    ("decode", "data"),
    [(decode_varint, b"\x80" * 5 + b"\x00"), (decode_varlong, b"\x80" * 10 + b"\x00")],
)
def test_overlong_input_is_rejected(decode, data):
    with pytest.raises(MalformedVarint, match="longer than"):
        decode(data)


@pytest.mark.parametrize(
    ("decode", "data"),
    [(decode_varint, b"\xff\xff\xff\xff\x1f"), (decode_varlong, b"\xff" * 9 + b"\x03")],
)
def test_value_overflowing_the_width_is_rejected(decode, data):
    with pytest.raises(MalformedVarint, match="overflows"):
        decode(data)


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff"])
def test_truncated_input_is_rejected(data):
    with pytest.raises(MalformedVarint, match="truncated"):
        decode_varint(data)


@settings(max_examples=300)
@given(st.binary(max_size=12), st.integers(0, 12))
def test_garbage_decodes_or_raises_malformed_varint(data, pos):
    for decode in (decode_varint, decode_varlong):
        try:
            _, end = decode(data, pos)
        except MalformedVarint:
            continue
        assert pos < end <= len(data)

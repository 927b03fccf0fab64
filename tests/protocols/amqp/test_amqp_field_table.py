"""Field tables: every RabbitMQ type, nested, byte-exact both ways, nesting bounded."""

from __future__ import annotations

import datetime
import decimal

import pytest
from amqp_strategies import field_tables
from hypothesis import given, settings

from protocols.amqp.codec.errors import DecodeError
from protocols.amqp.codec.field_table import (
    MAX_DEPTH, ByteArray, Float32, Int8, Int16, Int32, Int64, Timestamp, UInt8, UInt16, UInt32, decode_table,
    encode_table,
)
from protocols.amqp.codec.primitives import Reader
from protocols.amqp.spec import ReplyCode


def decode(raw: bytes) -> dict:
    reader = Reader(raw)
    table = decode_table(reader)
    assert reader.remaining == 0
    return table


def entry(name: bytes, tag: bytes, value: bytes) -> bytes:
    return bytes([len(name)]) + name + tag + value


def table_bytes(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return len(body).to_bytes(4, "big") + body


# Each type with its wire bytes, as RabbitMQ's rabbit_binary_parser reads them.
TYPED_VECTORS = [
    (True, b"t", b"\x01"), (False, b"t", b"\x00"),
    (Int8(-2), b"b", b"\xfe"), (UInt8(254), b"B", b"\xfe"),
    (Int16(-2), b"s", b"\xff\xfe"), (UInt16(65534), b"u", b"\xff\xfe"),
    (Int32(-2), b"I", b"\xff\xff\xff\xfe"), (UInt32(2**32 - 2), b"i", b"\xff\xff\xff\xfe"),
    (Int64(-2), b"l", b"\xff" * 7 + b"\xfe"),
    (Float32(1.5), b"f", b"\x3f\xc0\x00\x00"), (1.5, b"d", b"\x3f\xf8" + b"\x00" * 6),
    (decimal.Decimal("1.50"), b"D", b"\x02\x00\x00\x00\x96"),
    ("héllo", b"S", b"\x00\x00\x00\x06h\xc3\xa9llo"),
    (ByteArray(b"\x00\xff"), b"x", b"\x00\x00\x00\x02\x00\xff"),
    (Timestamp(1700000000), b"T", (1700000000).to_bytes(8, "big")),
    (None, b"V", b""),
    ([Int8(1), "a"], b"A", b"\x00\x00\x00\x08" + b"b\x01" + b"S\x00\x00\x00\x01a"),
    ({"k": Int8(1)}, b"F", b"\x00\x00\x00\x04" + b"\x01kb\x01"),
]


@pytest.mark.parametrize("value, tag, wire", TYPED_VECTORS, ids=lambda v: repr(v)[:20])
def test_each_field_type_has_its_rabbitmq_wire_form(value, tag, wire):
    raw = table_bytes(entry(b"key", tag, wire))
    assert encode_table({"key": value}) == raw
    decoded = decode(raw)["key"]
    assert decoded == value and type(decoded) is type(value)


def test_rabbitmq_uppercase_l_reads_as_a_signed_64_bit_integer():
    assert decode(table_bytes(entry(b"n", b"L", b"\xff" * 8))) == {"n": -1}


def test_plain_python_values_get_the_types_clients_use():
    raw = encode_table({"small": 5, "big": 2**40, "text": "x", "raw": b"\xff", "when":
                        datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)})
    decoded = decode(raw)
    assert type(decoded["small"]) is Int32 and type(decoded["big"]) is Int64
    assert decoded["text"] == "x"
    assert decoded["raw"] == b"\xff"     # an S that is not UTF-8 stays bytes, and encodes back as S
    assert decoded["when"] == 1704067200 and type(decoded["when"]) is Timestamp
    assert encode_table(decoded) == raw


@settings(max_examples=150, deadline=None)
@given(table=field_tables())
def test_nested_tables_of_every_type_round_trip_byte_for_byte(table):
    raw = encode_table(table)
    decoded = decode(raw)
    assert decoded == table
    assert encode_table(decoded) == raw


def nested(depth: int) -> dict:
    table: dict = {"leaf": True}
    for _ in range(depth):
        table = {"t": table}
    return table


def test_tables_nest_up_to_the_depth_bound():
    assert decode(encode_table(nested(MAX_DEPTH - 1))) == nested(MAX_DEPTH - 1)


def test_tables_nested_past_the_bound_are_a_syntax_error_on_decode_and_refused_on_encode():
    inner = table_bytes(entry(b"leaf", b"t", b"\x01"))
    for _ in range(MAX_DEPTH):
        inner = table_bytes(entry(b"t", b"F", inner))
    with pytest.raises(DecodeError, match="nested deeper") as caught:
        decode(inner)
    assert caught.value.reply_code == ReplyCode.SYNTAX_ERROR
    with pytest.raises(ValueError, match="nested deeper"):
        encode_table(nested(MAX_DEPTH))


def test_arrays_count_towards_the_nesting_bound():
    value: object = 1
    for _ in range(MAX_DEPTH + 1):
        value = [value]
    with pytest.raises(ValueError, match="nested deeper"):
        encode_table({"a": value})


def test_an_unknown_field_type_is_a_syntax_error():
    with pytest.raises(DecodeError, match="unknown field table value type") as caught:
        decode(table_bytes(entry(b"k", b"Z", b"")))
    assert caught.value.reply_code == ReplyCode.SYNTAX_ERROR


def test_a_table_length_beyond_its_payload_is_a_frame_error():
    with pytest.raises(DecodeError, match="needs 9 bytes") as caught:
        decode(b"\x00\x00\x00\x09" + b"\x01kt\x01")
    assert caught.value.reply_code == ReplyCode.FRAME_ERROR


def test_a_value_running_past_its_table_is_a_frame_error_even_with_bytes_after_the_table():
    # the inner table claims 3 bytes; its int32 value needs more than that, though the outer buffer has them
    raw = b"\x00\x00\x00\x03" + b"\x01kI" + b"\x00\x00\x00\x01"
    with pytest.raises(DecodeError, match="field needs 4 bytes"):
        decode_table(Reader(raw))


def test_negative_decimals_and_unencodable_values_are_refused():
    with pytest.raises(ValueError, match="unsigned"):
        encode_table({"d": decimal.Decimal("-1.5")})
    with pytest.raises(TypeError, match="no field table type for set"):
        encode_table({"s": {1, 2}})
    with pytest.raises(ValueError, match="does not fit"):
        encode_table({"n": 2**64})

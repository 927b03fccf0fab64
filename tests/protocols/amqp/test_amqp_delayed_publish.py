"""The AMQP side of delayed exchanges: which x-delay values delay, and reading a stored message's
headers and properties back for routing when it is due."""

from __future__ import annotations

import decimal

import pytest

from core.records.builder import Record
from protocols.amqp.codec.field_table import Int64
from protocols.amqp.codec.properties import BasicProperties
from protocols.amqp.delayed import MAX_DELAY_MS, delay_of, message_facts
from protocols.amqp.records import to_record


@pytest.mark.parametrize("value, delay", [
    (5000, 5000), (Int64(7), 7), ("1500", 1500), (b"20", 20), (2.9, 2), (decimal.Decimal("3.5"), 3),
    (MAX_DELAY_MS, MAX_DELAY_MS),
    (None, None), (0, None), (-100, None), ("-5", None), ("soon", None), (True, None),
    (MAX_DELAY_MS + 1, None), (float("inf"), None), ([1], None),
])
def test_which_x_delay_values_delay(value, delay) -> None:
    assert delay_of(value) == delay


def test_message_facts_decode_the_stored_content_header_only_when_asked() -> None:
    properties = BasicProperties(headers={"customer": "c1"}, message_id="m-1", timestamp=1_700_000_000)
    record = to_record("ex", "rk", properties.encode(), b"body", 0)
    headers, by_name = message_facts(record)
    assert headers() == {"customer": "c1"}
    assert by_name()["message_id"] == "m-1" and by_name()["timestamp"] == 1_700_000_000
    broken = message_facts(Record(0, b"rk", b"body", (("amqp.properties", b"\xff\xff\x00"),)))
    assert broken[0]() == {} and broken[1]() == {}
    foreign = message_facts(Record(0, b"rk", b"body"))       # a record no AMQP publisher wrote
    assert foreign[0]() == {} and foreign[1]() == {}

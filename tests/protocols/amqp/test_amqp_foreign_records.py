"""Records a Kafka producer wrote, delivered over AMQP: headers become the headers table, the
timestamp the timestamp property; records an AMQP publisher wrote keep their properties as stored."""

import pytest

from core.queues.attributes import GROUP
from core.queues.subscription import QueuedMessage
from protocols.amqp.codec.properties import EMPTY_PROPERTIES, BasicProperties
from protocols.amqp.records import message_envelope, to_record


def delivered(timestamp_ms: int, headers) -> tuple[str, str, BasicProperties]:
    exchange, routing_key, raw = message_envelope(QueuedMessage(0, timestamp_ms, b"rk", b"v", tuple(headers)))
    return exchange, routing_key, BasicProperties.decode(raw)


def test_kafka_headers_and_timestamp_become_properties() -> None:
    long_name = "n" * 256
    exchange, routing_key, properties = delivered(
        1_700_000_999_999, [("a", b"1"), ("raw", b"\xff"), ("gone", None), ("a", b"2"), (long_name, b"x")])
    assert (exchange, routing_key) == ("", "rk")
    assert properties == BasicProperties(headers={"a": "2", "raw": b"\xff", "gone": None}, timestamp=1_700_000_999)


def test_a_record_without_headers_or_timestamp_has_no_properties() -> None:
    assert delivered(-1, [])[2] == BasicProperties()
    assert message_envelope(QueuedMessage(0, -1, None, b"v", ()))[2] == EMPTY_PROPERTIES
    assert delivered(5_000, [])[2] == BasicProperties(timestamp=5)


def test_published_properties_pass_through_untouched() -> None:
    raw = BasicProperties(content_type="text/plain", headers={"h": 1}).encode()
    record = to_record("ex", "rk", raw, b"body", 1_700_000_000_000)
    message = QueuedMessage(0, record.timestamp_ms, record.key, record.value, tuple(record.headers))
    assert message_envelope(message) == ("ex", "rk", raw)


@pytest.mark.parametrize("headers, group", [
    ({"x-group-id": "order-7"}, b"order-7"),
    ({"JMSXGroupID": b"order-8"}, b"order-8"),
    ({"x-group-id": 42, "JMSXGroupID": "ignored"}, b"42"),
    ({"other": "x-group-id"}, None),                        # the name as a value is no group id
    ({}, None),
    (None, None),
])
def test_a_published_group_id_becomes_the_group_header(headers, group) -> None:
    raw = BasicProperties(headers=headers, delivery_mode=2).encode()
    record = to_record("ex", "rk", raw, b"body", 1_700_000_000_000)
    assert dict(record.headers).get(GROUP) == group

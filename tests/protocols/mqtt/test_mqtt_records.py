"""MQTT messages as records and back: what an MQTT subscriber gets is what was published, and a
record no MQTT client wrote (AMQP, Kafka) still makes a message."""

from __future__ import annotations

from core.queues.subscription import QueuedMessage
from core.records.builder import Record
from protocols.mqtt.records import Message, from_queued, to_record


def _queued(record: Record) -> QueuedMessage:
    return QueuedMessage(7, record.timestamp_ms, record.key, record.value, record.headers)


def test_a_message_comes_back_as_published():
    properties = {"user_property": [("b", "1"), ("a", "2"), ("b", "3")], "content_type": "text/plain",
                  "response_topic": "re/ply", "correlation_data": b"\x00\xffid", "payload_format_indicator": 1}
    message = Message("a.b/c", b"payload", 2, True, properties, "sender-1", 123_456)
    record = to_record(message, now_ms=1000)
    assert record.key == b"a/b.c"                  # the routing key: "/" and "." swapped
    assert from_queued(_queued(record)) == message


def test_qos_0_is_transient_and_others_are_not():
    transient = ("queue.transient", b"1")
    assert transient in to_record(Message("t", b"", 0), 0).headers
    assert transient not in to_record(Message("t", b"", 1), 0).headers


def test_a_foreign_record_is_qos_1_with_its_headers_as_user_properties():
    record = Record(5, key=b"billing.eu.done", value=b"paid",
                    headers=(("amqp.exchange", b"amq.topic"), ("region", b"eu"), ("queue.transient", b"1")))
    message = from_queued(_queued(record))
    assert (message.topic, message.payload, message.qos, message.retain) == ("billing/eu/done", b"paid", 1, False)
    assert message.properties == {"user_property": [("region", "eu")]}

"""The AMQP side of TTL and dead-lettering: the expiration property copied into the core's header on
publish, RabbitMQ's expiration errors, and x-death / x-delivery-count written on delivery."""

from __future__ import annotations

import datetime
import json

import pytest

from core.queues import attributes
from core.queues.subscription import QueuedMessage
from protocols.amqp.codec.field_table import Int64, Timestamp
from protocols.amqp.codec.properties import BasicProperties
from protocols.amqp.machine.errors import ChannelError
from protocols.amqp.records import message_envelope, to_record

NOW = 1_700_000_000_000


def test_the_expiration_property_becomes_an_absolute_deadline() -> None:
    raw = BasicProperties(content_type="text/plain", expiration="1500").encode()
    record = to_record("", "q", raw, b"body", NOW)
    assert dict(record.headers)[attributes.EXPIRES_AT] == str(NOW + 1500).encode()
    plain = to_record("", "q", BasicProperties(content_type="text/plain").encode(), b"body", NOW)
    assert attributes.EXPIRES_AT not in dict(plain.headers)


@pytest.mark.parametrize("expiration, reason", [
    ("abc", "no_integer"), ("", "no_integer"), (" 10", "no_integer"), ("-5", "{value_negative,-5}"),
    ("1.5", '{leftover_string,".5"}'),
])
def test_a_bad_expiration_is_refused_as_rabbitmq_words_it(expiration, reason) -> None:
    with pytest.raises(ChannelError) as refused:
        to_record("", "q", BasicProperties(expiration=expiration).encode(), b"", NOW)
    assert refused.value.reply_code == 406
    assert refused.value.reply_text == f"PRECONDITION_FAILED - invalid expiration '{expiration}': {reason}"


def stored(headers, deliveries: int = 0) -> QueuedMessage:
    return QueuedMessage(7, NOW, b"rk", b"body", tuple(headers), deliveries)


def test_a_dead_lettered_message_carries_x_death_and_loses_its_expiration() -> None:
    raw = BasicProperties(headers={"app": "x"}, expiration="100", message_id="m1").encode()
    doc = {"first": {"queue": "src", "reason": "expired", "exchange": ""},
           "deaths": [{"queue": "dlq", "reason": "rejected", "count": 2, "exchange": "dlx", "routing-keys": ["rk"],
                       "time": NOW},
                      {"queue": "src", "reason": "expired", "count": 1, "exchange": "", "routing-keys": ["src"],
                       "time": NOW - 5000, "original-expiration": "100"}]}
    message = stored([(attributes.EXCHANGE, b"dlx"), ("amqp.properties", raw),
                      (attributes.DEATH, json.dumps(doc).encode())])
    exchange, routing_key, properties = message_envelope(message)
    decoded = BasicProperties.decode(properties)
    assert (exchange, routing_key) == ("dlx", "rk")
    assert decoded.expiration is None and decoded.message_id == "m1"
    headers = decoded.headers
    assert headers["app"] == "x"
    newest, oldest = headers["x-death"]
    assert list(newest) == ["count", "reason", "queue", "time", "exchange", "routing-keys"]
    assert newest["count"] == 2 and isinstance(newest["count"], Int64)
    assert isinstance(newest["time"], Timestamp) and newest["time"] == NOW // 1000
    assert oldest["original-expiration"] == "100" and oldest["routing-keys"] == ["src"]
    assert (headers["x-first-death-queue"], headers["x-first-death-reason"]) == ("src", "expired")
    assert (headers["x-last-death-queue"], headers["x-last-death-reason"]) == ("dlq", "rejected")
    assert datetime.datetime.fromtimestamp(newest["time"], datetime.timezone.utc).year == 2023


def test_only_quorum_redeliveries_count_deliveries() -> None:
    raw = BasicProperties(content_type="a/b").encode()
    first = stored([("amqp.properties", raw)], deliveries=0)
    assert message_envelope(first, counts_deliveries=True)[2] == raw        # passed through untouched
    again = stored([("amqp.properties", raw)], deliveries=3)
    assert message_envelope(again)[2] == raw
    headers = BasicProperties.decode(message_envelope(again, counts_deliveries=True)[2]).headers
    assert headers == {"x-delivery-count": 3}

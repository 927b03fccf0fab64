"""MQTT and AMQP meet at the namespace's amq.topic, as with RabbitMQ's MQTT plugin: an MQTT publish
to a/b/c is an AMQP message with routing key a.b.c, and an AMQP publish to amq.topic reaches the
MQTT subscribers whose filters match."""

from __future__ import annotations

import pika

from compat_tests.mqtt.clients import V5, TestClient, v5_properties
from compat_tests.mqtt.conftest import Broker


def _amqp(gateway) -> pika.BlockingConnection:
    host, port = gateway.amqp
    credentials = pika.PlainCredentials("guest", "guest")
    return pika.BlockingConnection(pika.ConnectionParameters(host, port, credentials=credentials))


def test_mqtt_publish_reaches_an_amqp_queue_bound_to_amq_topic(mqtt_gateway):
    connection = _amqp(mqtt_gateway)
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(queue, "amq.topic", "devices.*.temp")
    device = TestClient(Broker("gateway", *mqtt_gateway.mqtt), protocol=V5)
    device.publish("devices/t1/temp", b"21.5", qos=1, properties=v5_properties(UserProperty=[("unit", "C")]))
    device.publish("devices/t1/humidity", b"40", qos=1)        # not bound
    method, properties, body = next(channel.consume(queue, auto_ack=True, inactivity_timeout=10))
    assert (method.exchange, method.routing_key, body) == ("amq.topic", "devices.t1.temp", b"21.5")
    assert properties.headers["unit"] == "C"           # a user property is an AMQP header
    assert channel.queue_declare(queue, passive=True).method.message_count == 0
    device.disconnect()
    connection.close()


def test_amqp_publish_to_amq_topic_reaches_mqtt_subscribers(mqtt_gateway):
    device = TestClient(Broker("gateway", *mqtt_gateway.mqtt))
    assert device.subscribe([("billing/+/done", 1), ("billing/#", 1), ("other/#", 1)]) == [1, 1, 1]
    connection = _amqp(mqtt_gateway)
    connection.channel().basic_publish("amq.topic", "billing.eu.done", b"paid",
                                       pika.BasicProperties(delivery_mode=2))
    [message] = device.receive()
    assert (message.topic, message.payload, message.qos) == ("billing/eu/done", b"paid", 1)
    device.nothing_more()          # matched by two filters, delivered once
    device.disconnect()
    connection.close()

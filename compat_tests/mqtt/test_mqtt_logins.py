"""Who may connect: the gateway's users (the same store as Kafka's and AMQP's), with the vhost in
the user name as RabbitMQ's MQTT plugin has it; and a vhost is a namespace of its own."""

from __future__ import annotations

from compat_tests.mqtt.clients import V5, V311, TestClient
from compat_tests.mqtt.conftest import DEVICE_PASSWORD, DEVICE_USER, DEVICE_VHOST, Broker


def _broker(mqtt_gateway) -> Broker:
    return Broker("gateway", *mqtt_gateway.mqtt)


def test_bad_credentials_and_foreign_vhosts_are_refused(mqtt_gateway):
    broker = _broker(mqtt_gateway)
    # paho reports a 3.1.1 return code as the 5.0 reason code of the same meaning (4 -> 0x86, 5 -> 0x87)
    cases = [
        (f"{DEVICE_VHOST}:{DEVICE_USER}", "wrong", V311, 0x86), (f"{DEVICE_VHOST}:{DEVICE_USER}", "wrong", V5, 0x86),
        (DEVICE_USER, DEVICE_PASSWORD, V311, 0x87), (DEVICE_USER, DEVICE_PASSWORD, V5, 0x87),   # vhost "/": not its own
        ("nobody", "x", V311, 0x86),
    ]
    for username, password, protocol, code in cases:
        client = TestClient(broker, protocol=protocol, username=username, password=password)
        assert client.connack[1].value == code, (username, protocol)
        client.client.loop_stop()


def test_a_user_publishes_in_its_own_vhost_only(mqtt_gateway):
    broker = _broker(mqtt_gateway)
    login = dict(username=f"{DEVICE_VHOST}:{DEVICE_USER}", password=DEVICE_PASSWORD)
    device = TestClient(broker, protocol=V5, **login)
    assert device.connack[1].value == 0
    colleague = TestClient(broker, **login)
    guest = TestClient(broker)                    # vhost "/", a namespace of its own
    colleague.subscribe("plant/#", qos=1)
    guest.subscribe("plant/#", qos=1)
    device.publish("plant/line1", b"ok", qos=1)
    assert colleague.receive()[0].payload == b"ok"
    guest.nothing_more()
    for client in (device, colleague, guest):
        client.disconnect()

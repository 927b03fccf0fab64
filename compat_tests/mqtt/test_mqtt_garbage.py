"""Hostile bytes on many connections close those connections only: a client that behaves, connected
all along, keeps publishing and receiving, and the gateway logs no traceback."""

from __future__ import annotations

import random
import socket

from compat_tests.mqtt.clients import V5, TestClient
from compat_tests.mqtt.conftest import Broker
from protocols.mqtt.codec import packets as pk

CONNECTS = [pk.Connect(pk.V311, "g311").encode(), pk.Connect(pk.V5, "g5").encode(), b""]


def test_garbage_after_connect_never_hurts_another_client(mqtt_gateway):
    broker = Broker("gateway", *mqtt_gateway.mqtt)
    good = TestClient(broker, protocol=V5)
    good.subscribe("garbage/ok", qos=1)
    rng = random.Random(20261202)
    for round_ in range(60):
        payload = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        if round_ % 3 == 0:      # a plausible first byte, then anything
            payload = bytes([rng.choice([0x30, 0x32, 0x82, 0xA2, 0x62, 0xE0, 0xF0])]) + payload
        with socket.create_connection(mqtt_gateway.mqtt, timeout=5) as sock:
            sock.sendall(CONNECTS[round_ % 3] + payload)
            sock.shutdown(socket.SHUT_WR)
            try:
                while sock.recv(4096):
                    pass
            except (ConnectionResetError, TimeoutError):
                pass
        if round_ % 20 == 19:
            good.publish("garbage/ok", str(round_).encode(), qos=1)
            assert good.receive()[0].payload == str(round_).encode()
    good.disconnect()
    assert "Traceback" not in mqtt_gateway.stderr

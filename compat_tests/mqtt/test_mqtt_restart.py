"""What MQTT acknowledged survives kill -9 of the gateway: a persistent session's subscription and
queued QoS 1 messages, retained messages, and the packet identifier of a QoS 2 publish received
(PUBREC) but not released, so the client's resend after the restart is not stored twice."""

from __future__ import annotations

import socket

from compat_tests.mqtt.clients import V311, TestClient
from compat_tests.mqtt.conftest import Broker
from protocols.mqtt.codec import packets as pk
from protocols.mqtt.codec.framing import Framer


class RawClient:
    """MQTT 3.1.1 packet by packet, for the steps a library hides (stopping between PUBREC and PUBREL)."""

    def __init__(self, address, client_id: str) -> None:
        self.sock = socket.create_connection(address, timeout=10)
        self.framer = Framer(1 << 20)
        self.pending: list = []
        self.send(pk.Connect(pk.V311, client_id, clean_start=False, keep_alive=60))
        self.connack = self.expect(pk.ConnAck)

    def send(self, packet) -> None:
        self.sock.sendall(packet.encode(pk.V311))

    def expect(self, kind):
        while not self.pending:
            frames, error = self.framer.feed(self.sock.recv(4096) or b"")
            assert error is None
            self.pending += [pk.decode(first, body, pk.V311) for first, body in frames]
        packet = self.pending.pop(0)
        assert isinstance(packet, kind), packet
        return packet

    def close(self) -> None:
        self.sock.close()


def test_sessions_retained_messages_and_qos2_state_survive_kill_9(gateway_launcher, tmp_path):
    data_dir = tmp_path / "data"
    gateway = gateway_launcher.start(data_dir=data_dir)
    broker = Broker("gateway", *gateway.mqtt)
    device = TestClient(broker, "restart-device", protocol=V311, clean=False)
    device.subscribe("plant/#", qos=2)
    device.disconnect()
    publisher = TestClient(broker, protocol=V311)
    publisher.publish("plant/1", b"queued-1", qos=1)
    publisher.publish("plant/2", b"queued-2", qos=1)
    publisher.publish("status/plant", b"running", qos=1, retain=True)
    publisher.disconnect()
    sender = RawClient(gateway.mqtt, "restart-sender")
    sender.send(pk.Publish("plant/3", b"exactly-once", qos=2, packet_id=7))
    assert sender.expect(pk.PublishAck) == pk.PublishAck(pk.PUBREC, 7)
    sender.close()

    gateway.kill()
    gateway = gateway_launcher.start(data_dir=data_dir)
    broker = Broker("gateway", *gateway.mqtt)

    sender = RawClient(gateway.mqtt, "restart-sender")
    assert sender.connack.session_present
    sender.send(pk.Publish("plant/3", b"exactly-once", qos=2, dup=True, packet_id=7))   # the resend
    assert sender.expect(pk.PublishAck) == pk.PublishAck(pk.PUBREC, 7)
    sender.send(pk.PublishAck(pk.PUBREL, 7))
    assert sender.expect(pk.PublishAck) == pk.PublishAck(pk.PUBCOMP, 7)
    sender.close()

    device = TestClient(broker, "restart-device", protocol=V311, clean=False)
    assert device.connack[0] is True
    got = sorted(m.payload for m in device.receive(3))
    assert got == [b"exactly-once", b"queued-1", b"queued-2"]
    device.nothing_more()
    device.disconnect()
    watcher = TestClient(broker, protocol=V311)
    watcher.subscribe("status/#", qos=1)
    [retained] = watcher.receive()
    assert (retained.topic, retained.payload, retained.retain) == ("status/plant", b"running", True)
    watcher.disconnect()

"""A paho-mqtt client for tests: connects synchronously, runs paho's network thread, and collects
what arrives in a queue so that a test waits for messages instead of sleeping."""

from __future__ import annotations

import itertools
import queue
import threading

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes

WAIT_S = 10.0
V311, V5 = mqtt.MQTTv311, mqtt.MQTTv5
_ids = itertools.count(1)


class TestClient:
    __test__ = False      # not a test class, whatever pytest thinks of its name

    def __init__(self, broker, client_id: str | None = None, *, protocol=V311, clean: bool = True,
                 session_expiry: int | None = None, will: tuple | None = None, keepalive: int = 30,
                 username: str | None = None, password: str | None = None, connect: bool = True) -> None:
        self.client_id = client_id if client_id is not None else f"test-{next(_ids)}"
        self.protocol = protocol
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=self.client_id, protocol=protocol,
                                  clean_session=clean if protocol != V5 else None)
        self.messages: queue.Queue = queue.Queue()
        self.connected = threading.Event()
        self.disconnected = threading.Event()
        self.connack = None
        self.disconnect_reason = None
        self.subacks: queue.Queue = queue.Queue()
        self.client.on_message = lambda c, u, message: self.messages.put(message)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_subscribe = lambda c, u, mid, codes, props: self.subacks.put((mid, codes, props))
        self.client.on_unsubscribe = lambda c, u, mid, codes, props: self.subacks.put((mid, codes, props))
        if username is not None:
            self.client.username_pw_set(username, password)
        if will is not None:
            topic, payload, qos, retain = will[:4]
            properties = will[4] if len(will) > 4 else None
            self.client.will_set(topic, payload, qos, retain, properties)
        self._broker = broker
        self._keepalive = keepalive
        self._clean = clean
        self._session_expiry = session_expiry
        if connect:
            self.connect()

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        self.connack = (flags.session_present, reason_code, properties)
        self.connected.set()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        self.disconnect_reason = reason_code
        self.disconnected.set()

    def connect(self) -> "TestClient":
        host, port = self._broker.address
        properties = None
        if self.protocol == V5:
            properties = Properties(PacketTypes.CONNECT)
            if self._session_expiry:
                properties.SessionExpiryInterval = self._session_expiry
        self.connected.clear()
        self.client.connect(host, port, keepalive=self._keepalive,
                            clean_start=self._clean if self.protocol == V5 else mqtt.MQTT_CLEAN_START_FIRST_ONLY,
                            properties=properties)
        self.client.loop_start()
        assert self.connected.wait(WAIT_S), "no CONNACK"
        return self

    def subscribe(self, topic, qos: int = 0, **options):
        """SUBSCRIBE and wait for the SUBACK; returns its reason codes."""
        if self.protocol == V5:
            from paho.mqtt.subscribeoptions import SubscribeOptions
            properties = options.pop("properties", None)
            result, mid = self.client.subscribe(topic, options=SubscribeOptions(qos=qos, **options),
                                                properties=properties)
        else:
            result, mid = self.client.subscribe(topic, qos)
        assert result == mqtt.MQTT_ERR_SUCCESS
        got_mid, codes, _ = self.subacks.get(timeout=WAIT_S)
        assert got_mid == mid
        return [int(code.value) if hasattr(code, "value") else int(code) for code in codes]

    def unsubscribe(self, topic):
        result, mid = self.client.unsubscribe(topic)
        got_mid, codes, _ = self.subacks.get(timeout=WAIT_S)
        return codes

    def publish(self, topic: str, payload: bytes = b"", qos: int = 0, retain: bool = False, properties=None):
        info = self.client.publish(topic, payload, qos, retain, properties)
        info.wait_for_publish(WAIT_S)
        assert info.is_published()
        return info

    def receive(self, count: int = 1, timeout: float = WAIT_S) -> list:
        return [self.messages.get(timeout=timeout) for _ in range(count)]

    def nothing_more(self, within: float = 0.3) -> bool:
        try:
            message = self.messages.get(timeout=within)
        except queue.Empty:
            return True
        raise AssertionError(f"unexpected message on {message.topic}: {message.payload!r}")

    def disconnect(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def drop(self) -> None:
        """Close the socket without DISCONNECT, as a device losing its network would."""
        self.client.loop_stop()
        self.client.socket().close()


def v5_properties(packet_type=PacketTypes.PUBLISH, **values) -> Properties:
    properties = Properties(packet_type)
    for name, value in values.items():
        setattr(properties, name, value)
    return properties

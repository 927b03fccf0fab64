"""paho-mqtt (3.1.1 and 5.0) against the gateway and, side by side, mosquitto: the same scenarios
must behave the same on both."""

from __future__ import annotations

import socket
import time

import pytest

from paho.mqtt.packettypes import PacketTypes

from compat_tests.mqtt.clients import V5, V311, TestClient, v5_properties


@pytest.fixture(params=[V311, V5], ids=["3.1.1", "5.0"])
def protocol(request):
    return request.param


def test_qos_levels_are_delivered_at_the_lower_of_publish_and_subscription_qos(mqtt_broker, protocol):
    subscriber = TestClient(mqtt_broker, protocol=protocol)
    publisher = TestClient(mqtt_broker, protocol=protocol)
    assert subscriber.subscribe("qos/+", qos=1) == [1]
    for qos in (0, 1, 2):
        publisher.publish(f"qos/{qos}", f"m{qos}".encode(), qos=qos)
    got = sorted((m.topic, m.payload, m.qos) for m in subscriber.receive(3))
    assert got == [("qos/0", b"m0", 0), ("qos/1", b"m1", 1), ("qos/2", b"m2", 1)]
    subscriber.nothing_more()
    subscriber.disconnect()
    publisher.disconnect()


def test_wildcards_match_levels_and_never_dollar_topics(mqtt_broker):
    client = TestClient(mqtt_broker)
    assert client.subscribe([("w/+/c", 0), ("w/#", 0), ("#", 0), ("$w/x", 0)]) == [0, 0, 0, 0]
    client.publish("w/b/c", b"1", qos=1)
    client.publish("$w/x", b"2", qos=1)
    # w/b/c matches three filters; a broker sends it once or once per filter (both allowed by MQTT)
    first = client.receive(2)
    topics = [m.topic for m in first]
    assert "w/b/c" in topics
    if "$w/x" not in topics:
        topics += [m.topic for m in client.receive(1)]
    while True:
        try:
            topics.append(client.receive(1, timeout=0.5)[0].topic)
        except Exception:
            break
    assert topics.count("$w/x") == 1             # only through "$w/x", never "#"
    client.disconnect()


def test_retained_message_goes_to_new_subscribers_until_cleared(mqtt_broker, protocol):
    publisher = TestClient(mqtt_broker, protocol=protocol)
    topic = f"retained/{protocol}/{time.monotonic_ns()}"
    publisher.publish(topic, b"old", qos=1, retain=True)
    publisher.publish(topic, b"last", qos=1, retain=True)
    first = TestClient(mqtt_broker, protocol=protocol)
    first.subscribe(topic, qos=1)
    [message] = first.receive()
    assert (message.payload, message.retain, message.qos) == (b"last", True, 1)
    publisher.publish(topic, b"live", qos=1, retain=True)
    [live] = first.receive()
    assert (live.payload, live.retain) == (b"live", False)    # a live message is not flagged retained
    publisher.publish(topic, b"", qos=1, retain=True)         # clears it
    first.receive()                                           # the empty message itself, live
    second = TestClient(mqtt_broker, protocol=protocol)
    second.subscribe(topic, qos=1)
    second.nothing_more()
    for client in (publisher, first, second):
        client.disconnect()


def test_persistent_session_keeps_subscriptions_and_messages_while_offline(mqtt_broker, protocol):
    client_id = f"persistent-{protocol}-{time.monotonic_ns()}"
    options = dict(protocol=protocol, clean=False, session_expiry=300)
    device = TestClient(mqtt_broker, client_id, **options)
    assert device.connack[0] is False
    device.subscribe("offline/#", qos=1)
    device.disconnect()
    publisher = TestClient(mqtt_broker)
    for index in range(3):
        publisher.publish(f"offline/{index}", str(index).encode(), qos=1)
    device = TestClient(mqtt_broker, client_id, **options)
    assert device.connack[0] is True
    got = {m.payload for m in device.receive(3)}
    assert got == {b"0", b"1", b"2"}
    device.disconnect()
    # a clean start ends the session: nothing kept for it any more
    TestClient(mqtt_broker, client_id, protocol=protocol, clean=True).disconnect()
    publisher.publish("offline/after", b"x", qos=1)
    device = TestClient(mqtt_broker, client_id, **options)
    assert device.connack[0] is False
    device.nothing_more()
    device.disconnect()
    publisher.disconnect()


def test_will_is_published_when_the_connection_drops_not_after_disconnect(mqtt_broker):
    watcher = TestClient(mqtt_broker)
    watcher.subscribe("will/#", qos=1)
    polite = TestClient(mqtt_broker, will=("will/polite", b"gone", 1, False))
    polite.disconnect()
    rude = TestClient(mqtt_broker, will=("will/rude", b"lost", 1, False))
    rude.drop()
    [message] = watcher.receive()
    assert (message.topic, message.payload) == ("will/rude", b"lost")
    watcher.nothing_more()
    watcher.disconnect()


def test_second_connection_with_the_same_client_id_takes_over(mqtt_broker, protocol):
    client_id = f"takeover-{protocol}-{time.monotonic_ns()}"
    first = TestClient(mqtt_broker, client_id, protocol=protocol)
    first.client.reconnect_delay_set(60, 60)     # paho would reconnect and take it back at once
    second = TestClient(mqtt_broker, client_id, protocol=protocol)
    assert first.disconnected.wait(10)
    if protocol == V5 and mqtt_broker.name == "gateway":
        # 0x8E Session taken over (a SHOULD of MQTT 5; mosquitto 2.0.11 just closes the socket)
        assert first.disconnect_reason.value == 0x8E
    second.subscribe("takeover/x", qos=1)
    second.publish("takeover/x", b"still here", qos=1)
    assert second.receive()[0].payload == b"still here"
    first.client.loop_stop()
    second.disconnect()


def test_user_properties_and_request_response_fields_pass_through(mqtt_broker):
    subscriber = TestClient(mqtt_broker, protocol=V5)
    publisher = TestClient(mqtt_broker, protocol=V5)
    subscriber.subscribe("props/x", qos=1)
    properties = v5_properties(UserProperty=[("b", "1"), ("a", "2"), ("b", "3")], ContentType="text/plain",
                               ResponseTopic="reply/here", CorrelationData=b"\x00\x01corr",
                               MessageExpiryInterval=3600)
    publisher.publish("props/x", b"p", qos=1, properties=properties)
    [message] = subscriber.receive()
    got = message.properties
    assert got.UserProperty == [("b", "1"), ("a", "2"), ("b", "3")]
    assert (got.ContentType, got.ResponseTopic, got.CorrelationData) == ("text/plain", "reply/here", b"\x00\x01corr")
    assert 3590 <= got.MessageExpiryInterval <= 3600
    subscriber.disconnect()
    publisher.disconnect()


def test_no_local_and_retain_as_published(mqtt_broker):
    client = TestClient(mqtt_broker, protocol=V5)
    client.subscribe("nl/mine", qos=1, noLocal=True)
    client.subscribe("nl/rap", qos=1, retainAsPublished=True)
    client.publish("nl/mine", b"own", qos=1)
    other = TestClient(mqtt_broker, protocol=V5)
    other.publish("nl/mine", b"theirs", qos=1)
    other.publish("nl/rap", b"kept", qos=1, retain=True)
    got = {(m.topic, m.payload, m.retain) for m in client.receive(2)}
    assert got == {("nl/mine", b"theirs", False), ("nl/rap", b"kept", True)}
    client.nothing_more()
    other.publish("nl/rap", b"", qos=1, retain=True)
    client.disconnect()
    other.disconnect()


def test_shared_subscription_hands_each_message_to_one_member(mqtt_broker):
    members = [TestClient(mqtt_broker, protocol=V5) for _ in range(2)]
    for member in members:
        member.subscribe("$share/workers/jobs/+", qos=1)
    publisher = TestClient(mqtt_broker, protocol=V5)
    for index in range(20):
        publisher.publish(f"jobs/{index}", str(index).encode(), qos=1)
    got = []
    deadline = time.monotonic() + 10
    while len(got) < 20 and time.monotonic() < deadline:
        for member in members:
            while not member.messages.empty():
                got.append(member.messages.get().payload)
        time.sleep(0.05)
    assert sorted(got, key=int) == [str(i).encode() for i in range(20)]
    for member in (*members, publisher):
        member.disconnect()


def test_puback_says_no_matching_subscribers(mqtt_broker):
    client = TestClient(mqtt_broker, protocol=V5)
    acks = []
    client.client.on_publish = lambda c, u, mid, reason_code, properties: acks.append(reason_code.value)
    client.publish(f"nobody/{time.monotonic_ns()}", b"x", qos=1)
    assert acks == [0x10]
    client.disconnect()


def test_topic_alias_from_the_client_is_resolved(mqtt_broker):
    subscriber = TestClient(mqtt_broker, protocol=V5)
    subscriber.subscribe("alias/topic", qos=1)
    publisher = TestClient(mqtt_broker, protocol=V5)
    publisher.publish("alias/topic", b"first", qos=1, properties=v5_properties(TopicAlias=1))
    publisher.publish("", b"second", qos=1, properties=v5_properties(TopicAlias=1))
    assert [m.payload for m in subscriber.receive(2)] == [b"first", b"second"]
    subscriber.disconnect()
    publisher.disconnect()


def _raw(address, data: bytes, until=None, timeout: float = 5.0) -> bytes:
    """What the broker answers to `data` until it closes the connection (or `until(answer)` holds)."""
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(data)
        answer = b""
        try:
            while until is None or not until(answer):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
        except ConnectionResetError:
            pass
        return answer


def _disconnect_reason(answer: bytes) -> int:
    """The reason code of the DISCONNECT that follows a 5.0 CONNACK in `answer`."""
    assert answer[0] == 0x20, answer
    disconnect = answer[2 + answer[1]:]
    assert disconnect[0] == 0xE0, answer
    return disconnect[2]


CONNECT_311 = bytes.fromhex("100f00044d5154540402003c0003726177")          # client id "raw"
CONNECT_5 = bytes.fromhex("101100044d5154540502003c00000472617735")            # client id "raw5"
CONNACK_311 = bytes.fromhex("20020000")
SUBSCRIBE_BAD_FILTER_311 = bytes.fromhex("820a00010005612f232f6201")      # "a/#/b"
SUBSCRIBE_BAD_FILTER_5 = bytes.fromhex("820b0001000005612f232f6201")


def test_invalid_filter_is_refused(mqtt_broker):
    """a/#/b: the gateway refuses that filter in the SUBACK (0x80; 5.0: 0x8F Topic Filter invalid),
    which MQTT allows; mosquitto closes the connection (5.0: DISCONNECT 0x81), which it allows too."""
    gateway = mqtt_broker.name == "gateway"
    suback_311, suback_5 = bytes.fromhex("9003000180"), bytes.fromhex("90040001008f")
    answer_311 = _raw(mqtt_broker.address, CONNECT_311 + SUBSCRIBE_BAD_FILTER_311,
                      until=(lambda answer: answer.endswith(suback_311)) if gateway else None)
    answer_5 = _raw(mqtt_broker.address, CONNECT_5 + SUBSCRIBE_BAD_FILTER_5,
                    until=(lambda answer: answer.endswith(suback_5)) if gateway else None)
    if gateway:
        assert answer_311 == CONNACK_311 + suback_311
        assert answer_5.endswith(suback_5)
    else:
        assert answer_311 in (b"", CONNACK_311)
        assert answer_5.endswith(bytes.fromhex("e00181"))
    client = TestClient(mqtt_broker)          # and the broker serves on
    client.disconnect()


def test_publish_before_connect_closes_the_connection(mqtt_gateway):
    assert _raw(mqtt_gateway.mqtt, bytes.fromhex("30070003612f626869")) == b""


def test_malformed_remaining_length_closes_the_connection(mqtt_gateway):
    assert _raw(mqtt_gateway.mqtt, CONNECT_311 + b"\x30\xff\xff\xff\xff\x01") == CONNACK_311
    answer = _raw(mqtt_gateway.mqtt, CONNECT_5 + b"\x30\xff\xff\xff\xff\x01")
    assert _disconnect_reason(answer) == 0x81          # 5.0: DISCONNECT Malformed Packet


def test_hostile_length_is_refused_before_the_body_arrives(mqtt_gateway):
    # 200 MB announced, 0 bytes sent: answered at once (Packet too large), not waited for
    answer = _raw(mqtt_gateway.mqtt, CONNECT_5 + b"\x30\xff\xff\xff\x5f")
    assert _disconnect_reason(answer) == 0x95          # Packet too large


def test_unknown_protocol_level_is_refused_with_connack(mqtt_gateway):
    connect = bytes.fromhex("100f00044d5154540902003c0003726177")        # level 9
    assert _raw(mqtt_gateway.mqtt, connect) == bytes.fromhex("20020001")


def test_will_delay_holds_the_will_back(mqtt_broker):
    watcher = TestClient(mqtt_broker)
    watcher.subscribe("delayed-will/#", qos=1)
    will_properties = v5_properties(PacketTypes.WILLMESSAGE, WillDelayInterval=2)
    device = TestClient(mqtt_broker, protocol=V5, session_expiry=60,
                        will=("delayed-will/x", b"late", 1, False, will_properties))
    device.drop()
    watcher.nothing_more(within=0.5)          # not at once
    [message] = watcher.receive()
    assert message.payload == b"late"
    watcher.disconnect()


def test_expired_message_is_not_delivered_to_a_returning_session(mqtt_broker):
    client_id = f"expiry-{time.monotonic_ns()}"
    device = TestClient(mqtt_broker, client_id, protocol=V5, clean=False, session_expiry=60)
    device.subscribe("expiring/#", qos=1)
    device.disconnect()
    publisher = TestClient(mqtt_broker, protocol=V5)
    publisher.publish("expiring/short", b"gone", qos=1, properties=v5_properties(MessageExpiryInterval=1))
    publisher.publish("expiring/long", b"kept", qos=1, properties=v5_properties(MessageExpiryInterval=600))
    time.sleep(2.2)
    device = TestClient(mqtt_broker, client_id, protocol=V5, clean=False, session_expiry=60)
    [message] = device.receive()
    assert message.payload == b"kept"
    device.nothing_more()
    device.disconnect()
    publisher.disconnect()


def test_unsubscribed_filter_gets_nothing_more(mqtt_broker, protocol):
    client = TestClient(mqtt_broker, protocol=protocol)
    client.subscribe("unsub/+", qos=1)
    client.publish("unsub/a", b"1", qos=1)
    assert client.receive()[0].payload == b"1"
    client.unsubscribe("unsub/+")
    client.publish("unsub/a", b"2", qos=1)
    client.nothing_more()
    client.disconnect()


def test_silent_client_is_dropped_after_one_and_a_half_keep_alives(mqtt_gateway):
    # (mosquitto does the same, on a coarser clock: several seconds late under load, so not run here)
    connect = bytes.fromhex("100f00044d5154540402" "0001" "0003726177")     # keep-alive 1 s
    started = time.monotonic()
    assert _raw(mqtt_gateway.mqtt, connect, timeout=20) == CONNACK_311      # then closed by the gateway
    assert time.monotonic() - started >= 1.4                                # not before 1.5 keep-alives


def test_retain_handling_2_sends_no_retained_messages(mqtt_broker):
    publisher = TestClient(mqtt_broker, protocol=V5)
    topic = f"rh/{time.monotonic_ns()}"
    publisher.publish(topic, b"kept", qos=1, retain=True)
    never, always = TestClient(mqtt_broker, protocol=V5), TestClient(mqtt_broker, protocol=V5)
    never.subscribe(topic, qos=1, retainHandling=2)
    always.subscribe(topic, qos=1, retainHandling=0)
    assert always.receive()[0].payload == b"kept"
    never.nothing_more()
    publisher.publish(topic, b"", qos=1, retain=True)
    for client in (publisher, never, always):
        client.disconnect()


def test_connack_announces_the_gateways_limits(mqtt_gateway):
    from compat_tests.mqtt.conftest import Broker
    client = TestClient(Broker("gateway", *mqtt_gateway.mqtt), protocol=V5)
    properties = client.connack[2]
    limits = (properties.ReceiveMaximum, properties.TopicAliasMaximum, properties.MaximumPacketSize)
    assert limits == (1024, 64, 16 << 20)
    assert (properties.SharedSubscriptionAvailable, properties.WildcardSubscriptionAvailable) == (1, 1)
    client.disconnect()

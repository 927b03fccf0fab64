"""The connection machine: what may come when, topic aliases, keep-alive, packet identifiers."""

from __future__ import annotations

import pytest

from protocols.mqtt.codec import packets as pk
from protocols.mqtt.machine import errors as rc
from protocols.mqtt.machine.connection import MqttMachine
from protocols.mqtt.machine.errors import ConnectionEnded


def _connected(version=pk.V5, keep_alive=10) -> MqttMachine:
    machine = MqttMachine(1 << 20, topic_alias_maximum=4)
    [connect] = machine.receive(pk.Connect(version, "c", keep_alive=keep_alive).encode(), now=0.0)
    assert connect.client_id == "c"
    return machine


def _ended_with(machine: MqttMachine, data: bytes) -> int:
    with pytest.raises(ConnectionEnded) as caught:
        list(machine.receive(data, now=1.0))
    return caught.value.reason_code


def test_the_first_packet_must_be_connect():
    assert _ended_with(MqttMachine(1 << 20), pk.PingReq().encode(pk.V311)) == rc.PROTOCOL_ERROR


def test_a_second_connect_is_a_protocol_error():
    assert _ended_with(_connected(), pk.Connect(pk.V5, "c").encode()) == rc.PROTOCOL_ERROR


def test_server_packets_from_a_client_are_refused():
    assert _ended_with(_connected(), pk.ConnAck().encode(pk.V5)) == rc.PROTOCOL_ERROR


def test_topic_aliases_are_set_then_used_and_bounded():
    machine = _connected()
    [first] = machine.receive(pk.Publish("x/y", b"1", properties={"topic_alias": 2}).encode(pk.V5), now=1.0)
    [second] = machine.receive(pk.Publish("", b"2", properties={"topic_alias": 2}).encode(pk.V5), now=1.0)
    assert (first.topic, second.topic) == ("x/y", "x/y")
    assert "topic_alias" not in second.properties
    assert _ended_with(machine, pk.Publish("", b"3", properties={"topic_alias": 3}).encode(pk.V5)) == rc.PROTOCOL_ERROR
    assert _ended_with(_connected(), pk.Publish("a", b"", properties={"topic_alias": 5}).encode(pk.V5)) \
        == rc.TOPIC_ALIAS_INVALID


def test_keep_alive_allows_one_and_a_half_intervals():
    machine = _connected(keep_alive=10)
    assert not machine.keep_alive_expired(15.0)
    assert machine.keep_alive_expired(15.1)
    assert not _connected(keep_alive=0).keep_alive_expired(1e9)


def test_packet_identifiers_skip_those_in_use_and_wrap():
    machine = _connected()
    assert machine.take_packet_id({1, 2}) == 3
    machine._next_packet_id = 0xFFFF
    assert machine.take_packet_id(set()) == 0xFFFF
    assert machine.take_packet_id({1}) == 2


def test_nothing_over_the_clients_maximum_packet_size_is_sent():
    machine = MqttMachine(1 << 20)
    list(machine.receive(pk.Connect(pk.V5, "c", properties={"maximum_packet_size": 50}).encode(), now=0.0))
    assert machine.encode(pk.Publish("t", b"x" * 10)) is not None
    assert machine.encode(pk.Publish("t", b"x" * 100)) is None

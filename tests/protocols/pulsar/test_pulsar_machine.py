"""The connection machine's rules: CONNECT first and once, the version both sides then speak, the
frame limit, keep-alive bookkeeping."""

from __future__ import annotations

import struct

import pytest

from protocols.pulsar.codec.frames import FrameReader, decode_frame, encode_command
from protocols.pulsar.codec.pulsar_wire_pb2 import BaseCommand
from protocols.pulsar.machine.connection import SERVER_PROTOCOL_VERSION, ProtocolViolation, PulsarServerConnection


def _connect(version: int) -> bytes:
    command = BaseCommand(type=BaseCommand.CONNECT)
    command.connect.client_version = "test"
    command.connect.protocol_version = version
    return encode_command(command)


def _ping() -> bytes:
    command = BaseCommand(type=BaseCommand.PING)
    command.ping.SetInParent()
    return encode_command(command)


@pytest.mark.parametrize("client, spoken", [(20, SERVER_PROTOCOL_VERSION), (6, 6), (-3, 0)])
def test_connected_announces_the_lower_version(client, spoken):
    machine = PulsarServerConnection(1 << 20)
    [frame] = machine.receive_data(_connect(client))
    assert frame.command.type == BaseCommand.CONNECT and machine.handshaken
    [connected] = FrameReader().feed(machine.connected(5 << 20))
    answer = decode_frame(connected).command.connected
    assert (answer.protocol_version, answer.max_message_size) == (spoken, 5 << 20)


def test_nothing_before_connect_and_connect_only_once():
    with pytest.raises(ProtocolViolation, match="before CONNECT"):
        PulsarServerConnection(1 << 20).receive_data(_ping())
    machine = PulsarServerConnection(1 << 20)
    machine.receive_data(_connect(19))
    with pytest.raises(ProtocolViolation, match="twice"):
        machine.receive_data(_connect(19))


def test_a_frame_over_the_limit_is_a_violation_before_its_body_arrives():
    machine = PulsarServerConnection(100)
    with pytest.raises(ProtocolViolation, match="exceeds"):
        machine.receive_data(struct.pack(">I", 101))


def test_keep_alive_notes_whether_the_peer_spoke_since_the_ping():
    machine = PulsarServerConnection(1 << 20)
    machine.receive_data(_connect(19))
    machine.ping()
    assert not machine.heard_since_ping
    machine.receive_data(_ping()[:3])       # part of a frame is not an answer yet
    assert not machine.heard_since_ping
    machine.receive_data(_ping()[3:])
    assert machine.heard_since_ping

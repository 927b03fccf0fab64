"""Bad input on the Pulsar port closes that connection and nothing else: garbage, an oversized
frame, a command before CONNECT and fuzzed frames; a command the gateway does not serve is answered
with ERROR and the connection stays. Afterwards the official client is served as before."""

from __future__ import annotations

import random
import socket
import struct

from compat_tests.pulsar.clients import client, receive_all, unique
from protocols.pulsar.codec.frames import FrameReader, decode_frame, encode_command, encode_payload_command
from protocols.pulsar.codec.pulsar_wire_pb2 import BaseCommand, MessageMetadata, NotAllowedError

CLIENT_CONNECT = bytes.fromhex(
    "0000002900000025080212210a1150756c7361722d4350502d76342e322e3020142a046e6f6e65520408011001")


def _connect(gateway) -> socket.socket:
    sock = socket.create_connection(gateway.pulsar, timeout=10)
    return sock


def _closed(sock: socket.socket) -> bool:
    """The gateway closed the connection (EOF or reset) instead of waiting for more."""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _frames(sock: socket.socket, count: int) -> list[BaseCommand]:
    reader, got = FrameReader(), []
    while len(got) < count:
        data = sock.recv(65536)
        assert data, "connection closed"
        got += [decode_frame(frame).command for frame in reader.feed(data)]
    return got


def test_garbage_an_oversized_frame_and_a_command_before_connect_close_the_connection(gateway):
    ping = BaseCommand(type=BaseCommand.PING)
    ping.ping.SetInParent()
    for payload in (b"GET / HTTP/1.1\r\n\r\n" * 3, struct.pack(">I", 1 << 30) + b"x" * 100, encode_command(ping)):
        with _connect(gateway) as sock:
            sock.sendall(payload)
            assert _closed(sock), payload[:20]


def test_an_unserved_command_is_answered_with_an_error_and_the_connection_stays(gateway):
    with _connect(gateway) as sock:
        sock.sendall(CLIENT_CONNECT)
        [connected] = _frames(sock, 1)
        assert connected.type == BaseCommand.CONNECTED and connected.connected.protocol_version == 19
        # a valid frame of a command that is declared but not served: the transactions' NEW_TXN
        sock.sendall(_new_txn())
        [error] = _frames(sock, 1)
        assert (error.type, error.error.request_id, error.error.error) == (BaseCommand.ERROR, 5, NotAllowedError)
        ping = BaseCommand(type=BaseCommand.PING)
        ping.ping.SetInParent()
        sock.sendall(encode_command(ping))
        assert _frames(sock, 1)[0].type == BaseCommand.PONG


def _new_txn() -> bytes:
    # BaseCommand {type: NEW_TXN (50), field 50: {request_id (1): 5}}, written out by hand: the
    # gateway's own module does not declare the transactions' bodies.
    body = bytes([0x08, 50]) + bytes([0x92, 0x03, 0x02, 0x08, 0x05])
    return struct.pack(">II", len(body) + 4, len(body)) + body


def test_fuzzed_frames_close_at_most_their_own_connection(gateway):
    producer = BaseCommand(type=BaseCommand.PRODUCER)
    producer.producer.topic = unique("fuzz")
    producer.producer.producer_id = 1
    producer.producer.request_id = 1
    send = BaseCommand(type=BaseCommand.SEND)
    send.send.producer_id = 1
    send.send.sequence_id = 0
    valid = [encode_command(producer),
             encode_payload_command(send, MessageMetadata(producer_name="f", sequence_id=0, publish_time=1), b"v")]
    rng = random.Random(20261202)
    for _ in range(25):
        frames = bytearray(b"".join(valid))
        for _ in range(rng.randint(1, 6)):
            position = rng.randrange(len(frames))
            frames[position] = rng.randrange(256)
        with _connect(gateway) as sock:
            sock.sendall(CLIENT_CONNECT + bytes(frames))
            sock.settimeout(0.3)
            _closed(sock)        # closed or answered, never anything else: the gateway goes on below
    pc = client(gateway)
    try:
        topic = unique("after-fuzz")
        consumer = pc.subscribe(topic, "s")
        pc.create_producer(topic).send(b"still served")
        assert [m.data() for m in receive_all(consumer, 1)] == [b"still served"]
    finally:
        pc.close()
    assert gateway.proc.poll() is None

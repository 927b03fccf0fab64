"""The Kafka listener of a real `gateway serve` against broken and hostile bytes, over raw sockets:
each bad connection is closed on its own while other clients keep producing and consuming."""

from __future__ import annotations

import random
import socket
import struct
import time
import uuid

import httpx
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

TIMEOUT_S = 10.0
API_VERSIONS, METADATA = 18, 3
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024


# --- raw framing (written by hand, independent of the gateway's codec) ----------------------------


def header(api_key: int, version: int, correlation_id: int = 1, client_id: str = "wire-test",
           flexible: bool = False) -> bytes:
    cid = client_id.encode()
    return struct.pack(">hhih", api_key, version, correlation_id, len(cid)) + cid + (b"\x00" if flexible else b"")


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def api_versions_v0(correlation_id: int = 1) -> bytes:
    return frame(header(API_VERSIONS, 0, correlation_id))


def metadata_v1(topics: list[str], correlation_id: int = 1) -> bytes:
    body = struct.pack(">i", len(topics)) + b"".join(struct.pack(">h", len(t)) + t.encode() for t in topics)
    return frame(header(METADATA, 1, correlation_id) + body)


def connect(gateway) -> socket.socket:
    sock = socket.create_connection(gateway.kafka, timeout=TIMEOUT_S)
    sock.settimeout(TIMEOUT_S)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError(f"connection closed after {len(data)} of {n} bytes")
        data += chunk
    return bytes(data)


def recv_response(sock: socket.socket) -> tuple[int, bytes]:
    """(correlation id, body) of the next response (response header v0)."""
    size = struct.unpack(">i", recv_exactly(sock, 4))[0]
    payload = recv_exactly(sock, size)
    return struct.unpack_from(">i", payload)[0], payload[4:]


def assert_closed_by_server(sock: socket.socket) -> None:
    """The server closes the connection (EOF or reset) without sending anything first."""
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return
    except TimeoutError:
        raise AssertionError(f"the server kept the connection open for {TIMEOUT_S}s") from None
    assert data == b"", f"expected the connection to be closed, got {data[:64]!r}"


def read_until_closed(sock: socket.socket) -> None:
    """Read whatever the server answers until it closes the connection."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if not sock.recv(65536):
                return
        except ConnectionResetError:
            return
        except TimeoutError:
            break
    raise AssertionError(f"the server kept the connection open for {TIMEOUT_S}s")


def assert_serves(gateway) -> None:
    """A fresh connection still gets ApiVersions answered."""
    with connect(gateway) as sock:
        sock.sendall(api_versions_v0(correlation_id=99))
        correlation_id, body = recv_response(sock)
        assert (correlation_id, struct.unpack_from(">h", body)[0]) == (99, 0)


def bootstrap(gateway) -> str:
    host, port = gateway.kafka
    return f"{host}:{port}"


class Bystander:
    """A kafka-python producer and consumer on one topic, to show other connections are unaffected."""

    def __init__(self, gateway) -> None:
        self.topic = f"bystander-{uuid.uuid4().hex[:8]}"
        self.producer = KafkaProducer(bootstrap_servers=bootstrap(gateway), acks="all")
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap(gateway), group_id=None,
                                      enable_auto_commit=False, auto_offset_reset="earliest")
        self.sent = 0

    def round_trip(self) -> None:
        value = b"message-%d" % self.sent
        self.producer.send(self.topic, value).get(TIMEOUT_S)
        self.sent += 1
        if not self.consumer.assignment():
            self.consumer.assign([TopicPartition(self.topic, 0)])
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            for records in self.consumer.poll(timeout_ms=500).values():
                for record in records:
                    if record.value == value:
                        return
        raise AssertionError(f"the bystander did not read back {value!r}")

    def close(self) -> None:
        self.producer.close()
        self.consumer.close()


@pytest.fixture
def bystander(gateway_process):
    client = Bystander(gateway_process)
    client.round_trip()
    yield client
    client.close()


# --- tests ----------------------------------------------------------------------------------------


def test_oversize_frame_closes_that_connection_while_a_bystander_keeps_producing_and_consuming(
        gateway_process, bystander):
    with connect(gateway_process) as sock:
        sock.sendall(struct.pack(">i", DEFAULT_MAX_FRAME_BYTES + 1) + b"\x00" * 1024)
        assert_closed_by_server(sock)
    bystander.round_trip()
    assert "frame size 104857601" in gateway_process.stderr


def test_configured_frame_limit_is_enforced(gateway_launcher):
    gateway = gateway_launcher.start("--kafka-max-frame-bytes", "4096")
    with connect(gateway) as sock:
        sock.sendall(metadata_v1(["t" * 4000]))  # a valid request of 4000-odd bytes: under the limit
        correlation_id, _ = recv_response(sock)
        assert correlation_id == 1
        sock.sendall(struct.pack(">i", 4097))
        assert_closed_by_server(sock)
    assert_serves(gateway)


@pytest.mark.parametrize("size", [-1, -(2**31)])
def test_negative_frame_size_closes_the_connection(gateway_process, bystander, size):
    with connect(gateway_process) as sock:
        sock.sendall(struct.pack(">i", size))
        assert_closed_by_server(sock)
    bystander.round_trip()


def test_unknown_api_key_closes_the_connection(gateway_process, bystander):
    with connect(gateway_process) as sock:
        sock.sendall(frame(header(9999, 0, client_id="unknown-key-client")))
        assert_closed_by_server(sock)
    bystander.round_trip()
    assert "unknown API key 9999" in gateway_process.stderr
    assert "unknown-key-client" in gateway_process.stderr
    metrics = httpx.get(f"{gateway_process.admin_url}/metrics", timeout=10).text
    assert 'gateway_connections_failed_total{listener="kafka",reason="protocol_errors"} 1.0' in metrics
    assert 'gateway_connections_failed_total{listener="kafka",reason="internal_errors"} 0.0' in metrics


def test_truncated_body_closes_the_connection(gateway_process, bystander):
    with connect(gateway_process) as sock:
        # Metadata v1 announcing one topic, with the topic missing: the frame size is right, the body is not.
        sock.sendall(frame(header(METADATA, 1) + struct.pack(">i", 1)))
        assert_closed_by_server(sock)
    bystander.round_trip()


def test_connection_dropped_inside_a_frame_leaves_the_server_serving(gateway_process, bystander):
    with connect(gateway_process) as sock:
        sock.sendall(metadata_v1(["half"])[:9])
    bystander.round_trip()
    assert_serves(gateway_process)


def test_api_versions_v4_gets_a_v0_answer_with_error_35_and_the_api_versions_range(gateway_process):
    with connect(gateway_process) as sock:
        # What a client newer than the broker sends first: ApiVersions v4 (flexible, header v2).
        body = b"\x0dkafka-python\x063.0.0\x00"
        sock.sendall(frame(header(API_VERSIONS, 4, correlation_id=5, flexible=True) + body))
        correlation_id, answer = recv_response(sock)
        error_code, count = struct.unpack_from(">hi", answer)
        ranges = {}
        for i in range(count):
            key, low, high = struct.unpack_from(">hhh", answer, 6 + 6 * i)
            ranges[key] = (low, high)
        assert (correlation_id, error_code) == (5, 35)
        assert len(answer) == 6 + 6 * count  # v0 format: no throttle time, no tagged fields
        assert ranges == {API_VERSIONS: (0, 3)}  # Kafka's KIP-511 answer names only ApiVersions itself
        # The client retries at a version we know, on the same connection.
        sock.sendall(frame(header(API_VERSIONS, 3, correlation_id=6, flexible=True) + body))
        correlation_id, answer = recv_response(sock)
        assert (correlation_id, struct.unpack_from(">h", answer)[0]) == (6, 0)


GARBAGE_SEED = 20240611
GARBAGE_FRAMES = 500
# Keys whose random bodies are harmless to the test when they happen to decode: nothing waits long.
GARBAGE_KEYS = (0, 2, 3, 18, 22, 17, 36, 999, -1, 32767)


def garbage(rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:      # anything at all
        return rng.randbytes(rng.randrange(1, 64))
    if kind == 1:      # a plausible header with a random version and body
        body = header(rng.choice(GARBAGE_KEYS), rng.randrange(-2, 15), rng.randrange(2**31),
                      client_id=rng.choice(["", "g", "garbage-client"])) + rng.randbytes(rng.randrange(0, 48))
        return frame(body)
    if kind == 2:      # a valid request with a few bytes flipped
        data = bytearray(metadata_v1(["garbage", "x"]) if rng.random() < 0.5 else api_versions_v0())
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data)
    # a frame whose declared size lies about its content
    payload = header(METADATA, 1) + rng.randbytes(rng.randrange(0, 16))
    return struct.pack(">i", len(payload) + rng.choice([-3, -1, 1, 2, 7, 1000])) + payload


def test_random_garbage_never_crashes_the_server(gateway_process, bystander):
    rng = random.Random(GARBAGE_SEED)
    for index in range(GARBAGE_FRAMES):
        data = garbage(rng)
        with connect(gateway_process) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)  # EOF: the server answers what was valid, then closes
            try:
                read_until_closed(sock)
            except AssertionError as exc:
                raise AssertionError(f"garbage frame {index} {data!r}: {exc}") from None
    assert gateway_process.proc.poll() is None
    bystander.round_trip()
    assert_serves(gateway_process)
    # Garbage is the client's fault: none of it may reach a handler bug (logged at ERROR), and
    # most of it must have been refused as a protocol error, one log line per connection.
    stderr = gateway_process.stderr
    errors = [line for line in stderr.splitlines() if " ERROR " in line]
    assert errors == [], "\n".join(errors[:20])
    assert stderr.count("closing Kafka connection from") > GARBAGE_FRAMES // 2

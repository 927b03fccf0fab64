"""Real clients against the machine.

The golden file holds the bytes pika sent in one session (handshake, channel, confirms, declare,
publish with properties, get, close), captured from the fake broker below and stored as annotated hex;
it is decoded offline so the check needs no client library. The live tests run pika and aio-pika
against the machine-driven fake broker over a real socket.

Regenerate the golden file with:  .venv/bin/python tests/protocols/amqp/test_amqp_golden.py
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest
from amqp_fake_broker import FakeBroker

from protocols.amqp.codec.frames import FrameReader
from protocols.amqp.codec.methods import decode_method
from protocols.amqp.codec.properties import decode_content_header
from protocols.amqp.machine.connection import AmqpServerConnection, ConnectionState
from protocols.amqp.machine.events import (
    AuthenticationRequested, ConnectionCloseRequested, ContentReceived, MethodReceived, VhostOpenRequested,
)
from protocols.amqp.machine.settings import ServerSettings
from protocols.amqp.spec import FRAME_BODY, FRAME_HEADER, FRAME_METHOD, PROTOCOL_HEADER

GOLDEN = Path(__file__).parent / "golden" / "pika_session.hex"
CLIENT_TIMEOUT = 30
BODY = b'{"order": 42, "items": ["a", "b"]}'


def pika_session(port: int) -> tuple:
    """The client side of the golden session; returns what basic.get gave back."""
    import pika

    params = pika.ConnectionParameters("127.0.0.1", port, heartbeat=30, socket_timeout=10,
                                       blocked_connection_timeout=10, connection_attempts=1)
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("orders", durable=True, arguments={"x-max-length": 1000})
        channel.basic_publish("", "orders", BODY, pika.BasicProperties(
            content_type="application/json", delivery_mode=2, priority=5, correlation_id="c-1",
            reply_to="replies", message_id="m-1", timestamp=1700000000, type="order", app_id="shop",
            headers={"x-retries": 0, "trace": ["a", "b"], "nested": {"ok": True}}))
        method, properties, body = channel.basic_get("orders", auto_ack=True)
        empty = channel.basic_get("orders")
        channel.close()
    finally:
        if connection.is_open:
            connection.close()
    return method, properties, body, empty


async def run_pika_against_fake_broker() -> tuple[FakeBroker, tuple]:
    broker = FakeBroker()
    server = await asyncio.start_server(broker.serve, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        result = await asyncio.wait_for(asyncio.to_thread(pika_session, port), CLIENT_TIMEOUT)
    finally:
        server.close()
        await server.wait_closed()
    return broker, result


# --- golden file: annotated hex, one client frame per line --------------------------------------------

def annotate(data: bytes) -> list[str]:
    lines = [f"{data[:8].hex(' ')}  # protocol header"]
    reader = FrameReader(frame_max=0)
    reader.feed(data[8:])
    for frame in reader.frames():
        wire = bytes([frame.type]) + frame.channel.to_bytes(2, "big") + len(frame.payload).to_bytes(4, "big") \
            + frame.payload + b"\xce"
        if frame.type == FRAME_METHOD:
            note = f"channel {frame.channel} {decode_method(frame.payload)[0].name}"
        elif frame.type == FRAME_HEADER:
            note = f"channel {frame.channel} content header, body size {decode_content_header(frame.payload).body_size}"
        elif frame.type == FRAME_BODY:
            note = f"channel {frame.channel} content body, {len(frame.payload)} bytes"
        else:
            note = f"channel {frame.channel} heartbeat"
        lines.append(f"{wire.hex(' ')}  # {note}")
    return lines


def read_golden(path: Path = GOLDEN) -> bytes:
    hex_text = "".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
    return bytes.fromhex(re.sub(r"\s+", "", hex_text))


def write_golden(data: bytes, path: Path = GOLDEN) -> None:
    import pika

    header = [
        f"# Client: pika {pika.__version__} (Python), BlockingConnection, heartbeat=30; every byte it sent",
        "# in one session against the machine-driven fake broker in tests/protocols/amqp/amqp_fake_broker.py.",
        "# Session: handshake (PLAIN guest/guest), channel.open, confirm.select, queue.declare with arguments,",
        "# basic.publish with 10 properties and a nested headers table, basic.get twice, channel.close,",
        "# connection.close. One frame per line; '#' starts a comment.",
    ]
    path.write_text("\n".join(header + annotate(data)) + "\n")


def decode_session(data: bytes, chunk: int) -> list:
    """Feed a captured client session to a fresh machine, answering as a broker that says yes."""
    conn = AmqpServerConnection(ServerSettings(capabilities={"publisher_confirms": True}))
    events: list = []

    def handle(batch: list) -> None:
        for event in batch:
            events.append(event)
            if isinstance(event, AuthenticationRequested):
                conn.accept_authentication()
                handle(conn.next_events())
            elif isinstance(event, VhostOpenRequested):
                conn.accept_vhost()
                handle(conn.next_events())
            elif isinstance(event, MethodReceived) and event.method_name == "channel.open":
                conn.send_method(event.channel, "channel.open-ok")

    for start in range(0, len(data), chunk):
        handle(conn.receive_data(data[start:start + chunk]))
    assert conn.state is ConnectionState.PEER_CLOSING
    return events


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_the_golden_pika_session_decodes_to_the_expected_events(chunk):
    data = read_golden()
    assert data.startswith(PROTOCOL_HEADER)
    events = decode_session(data, chunk)
    kinds = [(type(e).__name__, getattr(e, "method_name", None)) for e in events]
    assert kinds == [
        ("ProtocolHeaderAccepted", None), ("AuthenticationRequested", None), ("ConnectionTuned", None),
        ("VhostOpenRequested", None), ("MethodReceived", "channel.open"), ("MethodReceived", "confirm.select"),
        ("MethodReceived", "queue.declare"), ("ContentReceived", "basic.publish"), ("MethodReceived", "basic.get"),
        ("MethodReceived", "basic.get"), ("MethodReceived", "channel.close"), ("ConnectionCloseRequested", None),
    ]
    auth = events[1]
    assert (auth.mechanism, auth.username, auth.password) == ("PLAIN", "guest", "guest")
    assert auth.client_properties["product"] == "Pika Python Client Library"
    assert auth.client_properties["capabilities"]["authentication_failure_close"] is True
    tuned = events[2]
    assert (tuned.channel_max, tuned.frame_max, tuned.heartbeat) == (2047, 131072, 30)
    assert events[3].vhost == "/"
    declare = events[6].args
    assert (declare["queue"], declare["durable"], declare["arguments"]) == ("orders", True, {"x-max-length": 1000})
    publish: ContentReceived = events[7]
    assert (publish.args["exchange"], publish.args["routing_key"], publish.body) == ("", "orders", BODY)
    props = publish.properties.decoded
    assert (props.content_type, props.delivery_mode, props.priority, props.correlation_id, props.reply_to,
            props.message_id, props.timestamp, props.type, props.app_id) == (
        "application/json", 2, 5, "c-1", "replies", "m-1", 1700000000, "order", "shop")
    assert props.headers == {"x-retries": 0, "trace": ["a", "b"], "nested": {"ok": True}}
    assert events[8].args == {"ticket": 0, "queue": "orders", "no_ack": True}
    assert isinstance(events[-1], ConnectionCloseRequested) and events[-1].reply_code == 200


def test_the_golden_file_annotations_match_its_bytes():
    assert annotate(read_golden()) == [line for line in GOLDEN.read_text().splitlines() if not line.startswith("#")]


# --- live clients -----------------------------------------------------------------------------------

async def test_pika_runs_its_session_against_the_machine():
    pytest.importorskip("pika")
    broker, (method, properties, body, empty) = await run_pika_against_fake_broker()
    assert body == BODY and method.routing_key == "orders" and method.message_count == 0
    assert properties.headers == {"x-retries": 0, "trace": ["a", "b"], "nested": {"ok": True}}
    assert properties.timestamp == 1700000000 and properties.delivery_mode == 2
    assert empty == (None, None, None)
    # the live session decodes to the same events as the golden one
    live = [type(e).__name__ for e in decode_session(broker.captured[0], 4096)]
    golden = [type(e).__name__ for e in decode_session(read_golden(), 4096)]
    assert live == golden


async def test_aio_pika_publishes_consumes_and_acks_a_multi_frame_message():
    aio_pika = pytest.importorskip("aio_pika")
    broker = FakeBroker()
    server = await asyncio.start_server(broker.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    payload = bytes(range(256)) * 1200   # 300 KiB: many body frames both ways
    try:
        connection = await asyncio.wait_for(aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/"), 10)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue("big")
            await channel.default_exchange.publish(aio_pika.Message(payload, headers={"n": 1}, message_id="m"),
                                                   routing_key="big")
            async with queue.iterator() as messages:
                async for message in messages:
                    await message.ack()
                    break
        assert message.body == payload and message.headers == {"n": 1} and message.message_id == "m"
        kinds = [type(e).__name__ for e in broker.events[0]]
        assert "ContentReceived" in kinds and kinds[-1] == "ConnectionCloseRequested"
        acks = [e for e in broker.events[0] if isinstance(e, MethodReceived) and e.method_name == "basic.ack"]
        assert len(acks) == 1
    finally:
        server.close()
        await server.wait_closed()


async def test_aio_pika_sees_a_refused_login_as_an_authentication_error():
    aio_pika = pytest.importorskip("aio_pika")
    broker = FakeBroker()
    server = await asyncio.start_server(broker.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(aio_pika.exceptions.ProbableAuthenticationError, match="ACCESS_REFUSED"):
            await asyncio.wait_for(aio_pika.connect(f"amqp://guest:wrong@127.0.0.1:{port}/"), 10)
    finally:
        server.close()
        await server.wait_closed()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    captured_broker, _ = asyncio.run(run_pika_against_fake_broker())
    write_golden(captured_broker.captured[0])
    print(f"wrote {GOLDEN}")

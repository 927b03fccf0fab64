"""The asyncio adapter in-process, over raw sockets: handshake and login, heartbeats both ways, the
handshake timeout, errors that close one connection only, confirms, and the vhost and error
mappings it relies on."""

from __future__ import annotations

import asyncio
import contextlib

from amqp_client_frames import PROTOCOL_HEADER, method, open_vhost, publish, server_frames, start_ok, tune_ok

from core.auth import UserStore
from core.errors import Resource, ResourceLocked, StorageUnavailable, UnknownQueue
from protocols.amqp.codec.frames import FrameReader, encode_frame
from protocols.amqp.errors import from_core
from protocols.amqp.server import AmqpSettings, connection_handler, make_broker
from protocols.amqp.vhosts import authenticate, is_loopback, vhost_namespace


@contextlib.asynccontextmanager
async def serving(core, **settings):
    broker = make_broker(core, AmqpSettings(**settings))
    server = await asyncio.start_server(connection_handler(broker), "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[:2]
    finally:
        server.close()
        await broker.queues.close()


class RawClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.frames = FrameReader(frame_max=0)

    @classmethod
    async def connect(cls, address) -> "RawClient":
        return cls(*await asyncio.open_connection(*address))

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def next(self, timeout: float = 5.0) -> tuple:
        """The next frame the server sent, decoded (see server_frames)."""
        async with asyncio.timeout(timeout):
            while True:
                frame = self.frames.next_frame()
                if frame is not None:
                    return server_frames(encode_frame(frame.type, frame.channel, frame.payload))[0]
                data = await self.reader.read(65536)
                if not data:
                    raise EOFError("the server closed the connection")
                self.frames.feed(data)

    async def expect(self, name: str) -> dict:
        channel, got, args = await self.next()
        assert got == name, (got, args)
        return args

    async def closed(self, timeout: float = 5.0) -> bool:
        async with asyncio.timeout(timeout):
            while await self.reader.read(65536):
                pass
        return True

    async def handshake(self, heartbeat: int = 0, vhost: str = "/") -> None:
        self.send(PROTOCOL_HEADER)
        await self.expect("connection.start")
        self.send(start_ok())
        await self.expect("connection.tune")
        self.send(tune_ok(heartbeat=heartbeat) + open_vhost(vhost))
        await self.expect("connection.open-ok")

    async def confirming_channel(self, queue: str) -> None:
        """Channel 1 open in confirm mode, with `queue` declared."""
        self.send(method(1, "channel.open") + method(1, "queue.declare", queue=queue) + method(1, "confirm.select"))
        for name in ("channel.open-ok", "queue.declare-ok", "confirm.select-ok"):
            await self.expect(name)


def test_vhosts_map_to_tenants_and_namespaces() -> None:
    assert vhost_namespace("/") == ("public", "default")
    assert vhost_namespace("billing") == ("public", "billing")
    assert vhost_namespace("acme/billing") == ("acme", "billing")
    assert vhost_namespace("a/b/c") is None
    assert vhost_namespace("bad name") is None


def test_core_errors_read_as_rabbitmq_words_them() -> None:
    error = from_core(UnknownQueue.about(Resource.queue("q"), "no {resource}"), "/", 50, 10)
    assert (error.reply_code, error.reply_text, error.class_id, error.method_id) == (
        404, "NOT_FOUND - no queue 'q' in vhost '/'", 50, 10)
    locked = from_core(ResourceLocked.about(Resource.queue("q"), "exclusive access to locked {resource}. It could"),
                       "v")
    assert locked.reply_code == 405 and "locked queue 'q' in vhost 'v'. It could" in locked.reply_text
    assert not locked.closes_connection
    unavailable = from_core(StorageUnavailable("disk full"), "/")
    assert unavailable.reply_code == 541 and unavailable.closes_connection


async def test_guest_logs_in_from_loopback_only_and_configured_users_win(core) -> None:
    users = UserStore(core.metadata)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and not is_loopback("10.1.2.3")
    assert (await authenticate(users, "guest", "guest", "127.0.0.1")).principal.user == "guest"
    assert await authenticate(users, "guest", "guest", "10.1.2.3") is None
    assert await authenticate(users, "guest", "guest", "127.0.0.1", default_guest=False) is None
    await users.put_user("guest", "changed", iterations=1)
    assert await authenticate(users, "guest", "guest", "127.0.0.1") is None
    assert (await authenticate(users, "guest", "changed", "10.1.2.3")).principal.user == "guest"


async def test_capabilities_say_what_works(core) -> None:
    async with serving(core) as address:
        client = await RawClient.connect(address)
        client.send(PROTOCOL_HEADER)
        start = await client.expect("connection.start")
        assert start["server_properties"]["capabilities"] == {
            "connection.blocked": True, "publisher_confirms": True, "basic.nack": True, "consumer_cancel_notify": True,
            "exchange_exchange_bindings": True, "authentication_failure_close": True, "per_consumer_qos": True}
        assert start["mechanisms"] == b"PLAIN AMQPLAIN"
        client.writer.close()


async def test_server_sends_heartbeats_and_drops_a_silent_peer(core) -> None:
    async with serving(core) as address:
        client = await RawClient.connect(address)
        await client.handshake(heartbeat=1)
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert (await client.next(timeout=3))[1] == "heartbeat"
        # We send nothing at all: after two intervals without a byte the server gives up on us.
        assert await client.closed(timeout=6)
        assert loop.time() - started >= 1.5


async def test_a_silent_connection_is_closed_after_the_handshake_timeout(core) -> None:
    async with serving(core, handshake_timeout_s=0.2) as address:
        client = await RawClient.connect(address)
        client.send(PROTOCOL_HEADER)
        await client.expect("connection.start")
        assert await client.closed(timeout=5)


async def test_a_wrong_protocol_header_gets_ours_back(core) -> None:
    async with serving(core) as address:
        client = await RawClient.connect(address)
        client.send(b"AMQP\x01\x01\x00\x09")
        assert await client.reader.read(8) == PROTOCOL_HEADER
        assert await client.closed()


async def test_a_broken_frame_closes_that_connection_only(core) -> None:
    async with serving(core) as address:
        good = await RawClient.connect(address)
        await good.handshake()
        bad = await RawClient.connect(address)
        await bad.handshake()
        bad.send(b"\x01\x00\x01\x00\x00\x00\x05hello\x00")    # a method frame with the wrong end octet
        args = await bad.expect("connection.close")
        assert args["reply_code"] == 501
        assert await bad.closed()
        good.send(method(1, "channel.open"))
        await good.expect("channel.open-ok")


async def test_confirms_cover_consecutive_publishes_with_multiple(core) -> None:
    async with serving(core) as address:
        client = await RawClient.connect(address)
        await client.handshake()
        await client.confirming_channel("confirmed")
        client.send(b"".join(publish(1, b"m%d" % i, routing_key="confirmed") for i in range(50)))
        acked = 0
        while acked < 50:
            args = await client.expect("basic.ack")
            assert args["delivery_tag"] > acked
            assert args["multiple"] == (args["delivery_tag"] - acked > 1)
            acked = args["delivery_tag"]
        client.send(method(1, "basic.get", queue="confirmed", no_ack=True))
        assert (await client.expect("basic.get-ok"))["message_count"] == 49


async def test_methods_after_a_channel_error_in_the_same_read_are_dropped(core) -> None:
    async with serving(core) as address:
        client = await RawClient.connect(address)
        await client.handshake()
        client.send(method(1, "channel.open"))
        await client.expect("channel.open-ok")
        # One write: a publish to a missing exchange, then a queue.declare the closed channel must not run.
        client.send(publish(1, b"x", exchange="missing") + method(1, "queue.declare", queue="never"))
        args = await client.expect("channel.close")
        assert args["reply_code"] == 404 and (args["class_id"], args["method_id"]) == (60, 40)
        client.send(method(1, "channel.close-ok") + method(2, "channel.open")
                    + method(2, "queue.declare", queue="never", passive=True))
        await client.expect("channel.open-ok")
        assert (await client.expect("channel.close"))["reply_code"] == 404


async def test_acks_in_one_read_refill_the_window_and_an_unknown_tag_keeps_those_before_it(core) -> None:
    async with serving(core) as address:
        client = await RawClient.connect(address)
        await client.handshake()
        await client.confirming_channel("acked")
        client.send(b"".join(publish(1, b"m%d" % i, routing_key="acked") for i in range(8)))
        while (await client.expect("basic.ack"))["delivery_tag"] < 8:
            pass
        client.send(method(1, "basic.qos", prefetch_count=3)
                    + method(1, "basic.consume", queue="acked", consumer_tag="c"))
        await client.expect("basic.qos-ok")
        await client.expect("basic.consume-ok")
        assert [(await _expect_content(client, "basic.deliver"))["delivery_tag"] for _ in range(3)] == [1, 2, 3]
        # One write, three acks: the window opens by three and is refilled.
        client.send(b"".join(method(1, "basic.ack", delivery_tag=tag) for tag in (1, 2, 3)))
        assert [(await _expect_content(client, "basic.deliver"))["delivery_tag"] for _ in range(3)] == [4, 5, 6]
        # Then acks of 4 and 5 around an unknown tag: 4 counts (m7 takes its place), the channel
        # closes, 5, 6 and 7 go back.
        client.send(b"".join(method(1, "basic.ack", delivery_tag=tag) for tag in (4, 99, 5)))
        assert (await _expect_content(client, "basic.deliver"))["delivery_tag"] == 7
        args = await client.expect("channel.close")
        assert (args["reply_code"], args["class_id"], args["method_id"]) == (406, 60, 80)
        client.send(method(1, "channel.close-ok") + method(2, "channel.open")
                    + method(2, "queue.declare", queue="acked", passive=True))
        await client.expect("channel.open-ok")
        assert (await client.expect("queue.declare-ok"))["message_count"] == 4   # tags 1-4 (m0-m3) were acked


async def test_tx_commit_on_a_channel_never_selected_is_precondition_failed(core) -> None:
    async with serving(core) as address:
        client = await RawClient.connect(address)
        await client.handshake()
        client.send(method(1, "channel.open") + method(1, "tx.commit"))
        await client.expect("channel.open-ok")
        args = await client.expect("channel.close")
        assert (args["reply_code"], args["reply_text"], args["class_id"], args["method_id"]) == \
            (406, "PRECONDITION_FAILED - channel is not transactional", 90, 20)


async def test_channel_flow_pauses_and_resumes_deliveries(core) -> None:
    async with serving(core) as address:
        client = await RawClient.connect(address)
        await client.handshake()
        client.send(method(1, "channel.open") + method(1, "queue.declare", queue="flowing")
                    + method(1, "channel.flow", active=False)
                    + method(1, "basic.consume", queue="flowing", consumer_tag="c", no_ack=True))
        await client.expect("channel.open-ok")
        await client.expect("queue.declare-ok")
        assert (await client.expect("channel.flow-ok"))["active"] is False
        await client.expect("basic.consume-ok")
        client.send(method(2, "channel.open") + method(2, "confirm.select") + publish(2, b"held", routing_key="flowing"))
        await client.expect("channel.open-ok")
        await client.expect("confirm.select-ok")
        assert (await client.expect("basic.ack"))["delivery_tag"] == 1     # stored, but not delivered
        client.send(method(1, "channel.flow", active=True))
        assert (await client.expect("channel.flow-ok"))["active"] is True
        assert (await client.expect("basic.deliver"))["consumer_tag"] == "c"


async def _expect_content(client: RawClient, name: str) -> dict:
    """A content-bearing method, its header and body frames read past."""
    args = await client.expect(name)
    assert (await client.next())[1] == "header"
    await client.next()
    return args


def _ack_timeout_text(channel: int, timeout_ms: int) -> str:
    return (f"PRECONDITION_FAILED - delivery acknowledgement on channel {channel} timed out. Timeout value used: "
            f"{timeout_ms} ms. This timeout value can be configured, see consumers doc guide to learn more")


async def test_a_channel_holding_a_delivery_past_its_queues_timeout_is_closed_and_gives_it_back(core) -> None:
    clock = core.clock
    async with serving(core, consumer_timeout_ms=60_000) as address:
        client = await RawClient.connect(address)
        await client.handshake()
        client.send(method(1, "channel.open") + method(1, "confirm.select")
                    + method(1, "queue.declare", queue="short", arguments={"x-consumer-timeout": 5000})
                    + method(1, "queue.declare", queue="default")
                    + publish(1, b"s", routing_key="short") + publish(1, b"d", routing_key="default"))
        for reply in ("channel.open-ok", "confirm.select-ok", "queue.declare-ok", "queue.declare-ok"):
            await client.expect(reply)
        await client.expect("basic.ack")
        client.send(method(2, "channel.open") + method(2, "basic.consume", queue="short", consumer_tag="slow"))
        await client.expect("channel.open-ok")
        await client.expect("basic.consume-ok")
        assert (await _expect_content(client, "basic.deliver"))["redelivered"] is False
        client.send(method(3, "channel.open") + method(3, "basic.get", queue="default"))
        await client.expect("channel.open-ok")
        assert (await _expect_content(client, "basic.get-ok"))["redelivered"] is False
        clock.advance(7001)           # past the queue's 5000 ms even if stamped a whole tick early
        channel, name, args = await client.next()
        assert (channel, name) == (2, "channel.close")
        assert (args["reply_code"], args["reply_text"], args["class_id"], args["method_id"]) == \
            (406, _ack_timeout_text(2, 5000), 0, 0)
        # the basic.get on channel 3 is under the broker's 60 s: the channel still works
        client.send(method(2, "channel.close-ok") + method(3, "basic.get", queue="short"))
        assert (await _expect_content(client, "basic.get-ok"))["redelivered"] is True
        clock.advance(62_000)
        channel, name, args = await client.next()
        assert (channel, name, args["reply_text"]) == (3, "channel.close", _ack_timeout_text(3, 60_000))
        client.send(method(3, "channel.close-ok") + method(4, "channel.open")
                    + method(4, "basic.get", queue="default", no_ack=True)
                    + method(4, "basic.get", queue="short", no_ack=True))
        await client.expect("channel.open-ok")
        assert (await _expect_content(client, "basic.get-ok"))["redelivered"] is True
        assert (await _expect_content(client, "basic.get-ok"))["redelivered"] is True

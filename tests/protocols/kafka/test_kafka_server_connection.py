"""The asyncio adapter (protocols/kafka/server.py) over real loopback sockets, in-process:
back-pressure against a peer that does not read, and failures that close one connection only."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import Awaitable, Callable
from types import SimpleNamespace

import pytest

from protocols.kafka import registry
from protocols.kafka.broker import KafkaSettings
from protocols.kafka.server import MAX_PENDING, ConnectionFailures, KafkaConnection
from tests.polling import eventually

API_VERSIONS_KEY = 18
DEADLINE_S = 10.0
SMALL_SOCKET_BUFFER = 8192


def api_versions_request(correlation_id: int, client_id: str = "server-test") -> bytes:
    cid = client_id.encode()
    payload = struct.pack(">hhih", API_VERSIONS_KEY, 0, correlation_id, len(cid)) + cid
    return struct.pack(">i", len(payload)) + payload


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    frame = await reader.readexactly(size)
    return struct.unpack_from(">i", frame)[0], frame[4:]


def small_buffers(sock: socket.socket) -> socket.socket:
    # Fixed small kernel buffers (no autotuning), so a peer that does not read is felt quickly.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_SOCKET_BUFFER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL_SOCKET_BUFFER)
    return sock


class Harness:
    """A Kafka listener on loopback serving KafkaConnections with the given handlers."""

    def __init__(self, handlers: dict) -> None:
        self.handlers = handlers
        self.failures = ConnectionFailures()
        self.connections: list[KafkaConnection] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.tasks: list[asyncio.Task] = []
        self.server: asyncio.Server | None = None
        broker_settings = KafkaSettings(host="127.0.0.1", port=0)
        # The adapter needs only these of a broker; the handlers used here never touch the core.
        self.broker = SimpleNamespace(settings=broker_settings, api_versions=registry.advertised(), core=None)

    async def start(self) -> tuple[str, int]:
        sock = small_buffers(socket.socket())
        sock.bind(("127.0.0.1", 0))
        self.server = await asyncio.start_server(self._serve, sock=sock)
        return sock.getsockname()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = KafkaConnection(self.broker, reader, writer, handlers=self.handlers, failures=self.failures)
        self.connections.append(connection)
        self.writers.append(writer)
        self.tasks.append(asyncio.current_task())
        try:
            await connection.run()
        except asyncio.CancelledError:
            pass  # torn down by close(); a stream task ending cancelled makes asyncio log an error

    async def connect(self, address) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        sock = small_buffers(socket.socket())
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, address)
        return await asyncio.open_connection(sock=sock)

    async def close(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture
async def harness_factory():
    made: list[Harness] = []

    async def make(overrides: dict[int, Callable[..., Awaitable]]) -> tuple[Harness, tuple[str, int]]:
        harness = Harness({**registry.HANDLERS, **overrides})
        made.append(harness)
        return harness, await harness.start()
    yield make
    for harness in made:
        await harness.close()


def bulky_api_versions(counter: list[int], entries: int = 300):
    """An ApiVersions handler with a ~2 KB answer that counts the requests it handled."""
    async def handle(request, ctx):
        counter[0] += 1
        return {"error_code": 0, "api_keys": [{"api_key": i, "min_version": 0, "max_version": 1}
                                              for i in range(entries)]}
    return handle


async def test_peer_that_does_not_read_stops_the_reader_with_bounded_buffers(harness_factory):
    handled = [0]
    harness, address = await harness_factory({API_VERSIONS_KEY: bulky_api_versions(handled)})
    reader, writer = await harness.connect(address)
    total = 1500
    # ~1 KB requests: 1.5 MB is more than the server side buffers, so the client must get stuck.
    requests = b"".join(api_versions_request(i, client_id="c" * 1000) for i in range(total))
    writer.write(requests)
    sending = asyncio.ensure_future(writer.drain())

    await eventually(lambda: harness.connections and harness.connections[0].pending_responses == MAX_PENDING,
                     DEADLINE_S, "the pending-response queue is full")
    server_transport = harness.writers[0].transport
    low_water, high_water = server_transport.get_write_buffer_limits()
    # Writing pauses above the high-water mark and resumes only below the low one.
    await eventually(lambda: server_transport.get_write_buffer_size() > low_water, DEADLINE_S, "the sender waits in drain()")
    # Stalled: the queue is at its bound, the transport holds at most one response past its
    # high-water mark, and the requests not yet handled stay unread in the client's socket.
    assert harness.connections[0].pending_responses == MAX_PENDING
    assert server_transport.get_write_buffer_size() <= high_water + 4096
    assert handled[0] < total
    assert not sending.done(), "the client could send everything: the server kept reading"

    # Once the client reads, everything is answered, in order.
    correlation_ids = [(await read_response(reader))[0] for _ in range(total)]
    assert correlation_ids == list(range(total))
    await asyncio.wait_for(sending, DEADLINE_S)
    assert handled[0] == total
    writer.close()


async def test_ready_responses_wait_for_deferred_ones_before_them(harness_factory):
    # Odd requests answer later (as Produce does, once durable); even ones at once, which the
    # reader writes itself only when nothing before them is still to be written.
    release = asyncio.Event()
    answer = {"error_code": 0, "api_keys": []}
    handled = []

    async def handle(request, ctx):
        handled.append(ctx.header.correlation_id)
        if ctx.header.correlation_id % 2 == 0:
            return answer

        async def later():
            await release.wait()
            return answer
        return later()
    harness, address = await harness_factory({API_VERSIONS_KEY: handle})
    reader, writer = await harness.connect(address)
    writer.write(api_versions_request(0))
    assert (await read_response(reader))[0] == 0
    writer.write(api_versions_request(1))
    await eventually(lambda: handled[-1] == 1 and harness.connections[0].pending_responses == 0,
                     DEADLINE_S, "the sender holds the first")
    writer.write(b"".join(api_versions_request(i) for i in range(2, 7)))
    await eventually(lambda: harness.connections[0].pending_responses == 5, DEADLINE_S, "the next five are queued")
    release.set()
    assert [(await read_response(reader))[0] for _ in range(6)] == [1, 2, 3, 4, 5, 6]
    writer.write(api_versions_request(8))
    assert (await read_response(reader))[0] == 8
    writer.close()


async def test_handler_exception_closes_only_that_connection_after_one_log_line(harness_factory, caplog):
    async def broken(request, ctx):
        raise RuntimeError("handler bug")
    harness, address = await harness_factory({3: broken})
    bystander_reader, bystander_writer = await harness.connect(address)
    reader, writer = await harness.connect(address)
    metadata_v0 = struct.pack(">hhih", 3, 0, 2, 6) + b"victim" + struct.pack(">i", 0)
    # A good request, then the one the handler fails on: the first is still answered.
    writer.write(api_versions_request(1, "victim") + struct.pack(">i", len(metadata_v0)) + metadata_v0)
    with caplog.at_level(logging.WARNING, logger="gateway.kafka"):
        assert (await read_response(reader))[0] == 1
        assert await reader.read() == b""
        await eventually(lambda: harness.failures.internal_errors == 1, DEADLINE_S, "the failure is counted")
    [record] = [r for r in caplog.records if r.name == "gateway.kafka"]
    assert record.levelno == logging.ERROR
    message = record.getMessage()
    assert "'victim'" in message and "Metadata v0" in message and "handler bug" in message
    assert str(writer.get_extra_info("sockname")[1]) in message  # the peer's port

    bystander_writer.write(api_versions_request(5, "bystander"))
    assert (await read_response(bystander_reader))[0] == 5


@pytest.mark.parametrize("requests_behind", [0, MAX_PENDING + 10], ids=["reader-in-read", "reader-in-full-queue"])
async def test_failure_of_a_deferred_response_ends_the_connection_even_while_the_peer_waits(harness_factory,
                                                                                          requests_behind):
    release = asyncio.Event()
    calls = [0]

    async def deferred_failure(request, ctx):
        calls[0] += 1

        async def later():
            await release.wait()
            raise RuntimeError("deferred bug")
        return later()
    harness, address = await harness_factory({API_VERSIONS_KEY: deferred_failure})
    reader, writer = await harness.connect(address)
    # With requests behind the failing one, the pending queue fills and the reader waits on it;
    # without, the reader waits for more bytes that never come.
    writer.write(b"".join(api_versions_request(i) for i in range(1 + requests_behind)))
    # Handled: the failing one (held by the sender), then MAX_PENDING queued and one waiting for room.
    handled, queued = (1, 0) if requests_behind == 0 else (MAX_PENDING + 2, MAX_PENDING)
    await eventually(lambda: calls[0] == handled and harness.connections[0].pending_responses == queued,
                     DEADLINE_S, "the reader is waiting")
    release.set()
    # The peer sends nothing more and keeps its socket open: the server must still end the connection.
    assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""
    await asyncio.wait_for(harness.tasks[0], DEADLINE_S)
    assert harness.failures.internal_errors == 1
    writer.close()


async def test_unknown_api_key_is_logged_once_as_a_protocol_error(harness_factory, caplog):
    harness, address = await harness_factory({})
    reader, writer = await harness.connect(address)
    payload = struct.pack(">hhih", 999, 0, 4, 5) + b"probe"
    with caplog.at_level(logging.WARNING, logger="gateway.kafka"):
        writer.write(struct.pack(">i", len(payload)) + payload)
        assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""
        await asyncio.wait_for(harness.tasks[0], DEADLINE_S)
    [record] = [r for r in caplog.records if r.name == "gateway.kafka"]
    assert record.levelno == logging.WARNING
    assert "unknown API key 999" in record.getMessage() and "'probe'" in record.getMessage()
    assert (harness.failures.protocol_errors, harness.failures.internal_errors) == (1, 0)


async def test_api_versions_v4_gets_a_v0_answer_with_unsupported_version_and_its_own_range(harness_factory):
    harness, address = await harness_factory({})
    reader, writer = await harness.connect(address)
    # kafka-python 3 / librdkafka first send ApiVersions at their newest version, with a v2 header.
    payload = struct.pack(">hhih", API_VERSIONS_KEY, 4, 77, 2) + b"kp" + b"\x00" + b"\x03kp\x041.0\x00"
    writer.write(struct.pack(">i", len(payload)) + payload)
    correlation_id, body = await read_response(reader)
    error_code, count = struct.unpack_from(">hi", body)
    ranges = {struct.unpack_from(">h", body, 6 + 6 * i)[0]: struct.unpack_from(">hh", body, 8 + 6 * i)
              for i in range(count)}
    assert (correlation_id, error_code, len(body)) == (77, 35, 6 + 6 * count)  # v0: no throttle time
    assert ranges == {API_VERSIONS_KEY: registry.APIS[API_VERSIONS_KEY].versions}  # as Kafka: only its own
    writer.close()


async def test_client_that_disconnects_while_responses_are_pending_ends_quietly(harness_factory, caplog):
    handled = [0]
    harness, address = await harness_factory({API_VERSIONS_KEY: bulky_api_versions(handled)})
    reader, writer = await harness.connect(address)
    writer.write(b"".join(api_versions_request(i) for i in range(200)))
    await eventually(lambda: handled[0] > MAX_PENDING, DEADLINE_S, "requests are being handled")
    with caplog.at_level(logging.WARNING, logger="gateway.kafka"):
        writer.transport.abort()
        await asyncio.wait_for(harness.tasks[0], DEADLINE_S)
    assert [r for r in caplog.records if r.name == "gateway.kafka"] == []
    assert (harness.failures.protocol_errors, harness.failures.internal_errors) == (0, 0)


async def test_a_second_failure_while_closing_is_not_logged_or_counted_again(harness_factory, caplog):
    release = asyncio.Event()

    async def deferred_failure(request, ctx):
        async def later():
            await release.wait()
            raise RuntimeError("queued response bug")
        return later()

    async def broken(request, ctx):
        release.set()
        raise RuntimeError("handler bug")
    harness, address = await harness_factory({API_VERSIONS_KEY: deferred_failure, 3: broken})
    reader, writer = await harness.connect(address)
    metadata_v0 = struct.pack(">hhih", 3, 0, 2, 1) + b"m" + struct.pack(">i", 0)
    with caplog.at_level(logging.WARNING, logger="gateway.kafka"):
        writer.write(api_versions_request(1) + struct.pack(">i", len(metadata_v0)) + metadata_v0)
        assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""
        await asyncio.wait_for(harness.tasks[0], DEADLINE_S)
    assert len([r for r in caplog.records if r.name == "gateway.kafka"]) == 1
    assert harness.failures.internal_errors == 1
    writer.close()

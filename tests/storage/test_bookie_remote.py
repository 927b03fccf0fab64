"""The bookie wire protocol end to end: a real Bookie behind a BookieServer on loopback, driven by
RemoteBookie clients and by raw sockets sending what a client never should."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.api import BookieUnavailable, LedgerFenced, NoSuchEntry, NoSuchLedger
from storage.bookie import protocol as wire
from storage.bookie.bookie import Bookie
from storage.bookie.protocol import Op, Status
from storage.bookie.remote import RemoteBookie
from storage.bookie.server import BookieServer
from storage.config import StorageConfig
from storage.metadata.sqlite import SqliteMetadataStore

SECRET = b"cluster secret"


@pytest.fixture
async def served(tmp_path):
    metadata = await SqliteMetadataStore.open(tmp_path / "metadata.db")
    bookie = await Bookie.open(tmp_path / "bookie", StorageConfig(), metadata, bookie_id="b1")
    server = BookieServer(bookie, "b1", "instance-1", SECRET)
    host, port = await server.start("127.0.0.1", 0)
    clients: list[RemoteBookie] = []

    def client(secret: bytes = SECRET, bookie_id: str = "b1", **kwargs) -> RemoteBookie:
        remote = RemoteBookie(bookie_id, host, port, secret, **kwargs)
        clients.append(remote)
        return remote

    yield server, client, (host, port)
    for remote in clients:
        await remote.close()
    await server.close()
    await bookie.close()
    await metadata.close()


async def test_adds_reads_and_lac_round_trip(served):
    _, client, _ = served
    remote = client()
    acks = [remote.add(7, entry_id, (b"head-", b"entry %d" % entry_id), entry_id - 1) for entry_id in range(50)]
    await asyncio.gather(*acks)
    assert await remote.read(7, 3) == b"head-entry 3"
    assert [bytes(e) for e in await remote.read_range(7, 10, 12, 1 << 20)] == [b"head-entry 10", b"head-entry 11",
                                                                                b"head-entry 12"]
    assert await remote.last_add_confirmed(7) == 48
    with pytest.raises(NoSuchEntry):
        await remote.read(7, 50)
    assert [bytes(e) for e in await remote.read_entries(7, [40, 3, 17])] == [b"head-entry 40", b"head-entry 3",
                                                                              b"head-entry 17"]
    with pytest.raises(NoSuchEntry):
        await remote.read_entries(7, [3, 50])
    with pytest.raises(NoSuchLedger):
        await remote.last_add_confirmed(8)


async def test_fencing_refuses_the_old_writer_but_not_recovery(served):
    _, client, _ = served
    writer, recoverer = client(), client()
    await writer.add(1, 0, b"zero", -1)
    assert await recoverer.fence_with_lac(1) == (0, -1)
    with pytest.raises(LedgerFenced):
        await writer.add(1, 1, b"one", 0)
    await recoverer.add(1, 1, b"one again", 0, recovery=True)
    assert await recoverer.read(1, 1) == b"one again"


async def test_a_fencing_read_fences(served):
    _, client, _ = served
    writer, reader = client(), client()
    await writer.add(2, 0, b"zero", -1)
    assert await reader.read(2, 0, fence=True) == b"zero"
    with pytest.raises(LedgerFenced):
        await writer.add(2, 1, b"one", 0)


async def test_long_poll_of_the_lac(served):
    _, client, _ = served
    writer, reader = client(), client()
    await writer.add(3, 0, b"a", -1)
    poll = asyncio.ensure_future(reader.wait_lac(3, -1, 5.0))
    await asyncio.sleep(0)
    await writer.add(3, 1, b"b", 0)
    assert await asyncio.wait_for(poll, 5.0) == 0
    assert await reader.wait_lac(3, 0, 0.05) == 0   # nothing newer: answered at the timeout


async def test_an_explicit_lac_raises_the_lac_and_wakes_its_long_poll(served):
    _, client, _ = served
    writer, reader = client(), client()
    await writer.add(9, 0, b"a", -1)
    await writer.add(9, 1, b"b", 0)
    poll = asyncio.ensure_future(reader.wait_lac(9, 0, 5.0))
    await asyncio.sleep(0)
    await writer.write_lac(9, 1)
    assert await asyncio.wait_for(poll, 5.0) == 1
    await writer.write_lac(9, 0)                       # never lowers it
    assert await reader.last_add_confirmed(9) == 1


async def test_responses_complete_out_of_order_and_match_their_requests(served):
    _, client, _ = served
    remote = client()
    await remote.add(4, 0, b"x" * 1000, -1)
    # A long poll that stays open while many quick requests are answered on the same connection.
    poll = asyncio.ensure_future(remote.wait_lac(4, 5, 5.0))
    reads = await asyncio.gather(*(remote.read(4, 0) for _ in range(20)))
    assert reads == [b"x" * 1000] * 20
    assert not poll.done()
    await asyncio.gather(*(remote.add(4, i, b"y", i - 1) for i in range(1, 8)))
    assert await asyncio.wait_for(poll, 5.0) == 6


async def test_wrong_secret_is_refused(served):
    _, client, _ = served
    with pytest.raises(BookieUnavailable, match="authentication failed"):
        await client(secret=b"wrong").read(1, 0)


async def test_talking_to_another_bookie_than_expected_is_refused(served):
    _, client, _ = served
    with pytest.raises(BookieUnavailable):
        await client(bookie_id="b2").read(1, 0)


async def test_unreachable_bookie_fails_fast_during_backoff(served):
    server, client, (host, port) = served
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    remote = RemoteBookie("b1", "127.0.0.1", free_port, SECRET, reconnect_backoff_s=30)
    with pytest.raises(BookieUnavailable):
        await remote.read(1, 0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(BookieUnavailable):
        await remote.read(1, 0)
    assert loop.time() - started < 1.0
    await remote.close()


async def test_lost_connection_fails_pending_then_reconnects(served):
    server, client, _ = served
    remote = client(reconnect_backoff_s=0)
    await remote.add(5, 0, b"a", -1)
    poll = asyncio.ensure_future(remote.wait_lac(5, 10, 10.0))
    await asyncio.sleep(0.05)
    for connection in list(server._connections):
        connection.close()
    with pytest.raises(BookieUnavailable):
        await asyncio.wait_for(poll, 5.0)
    assert await remote.read(5, 0) == b"a"   # a new connection


async def test_a_silent_bookie_times_out(tmp_path):
    """A bookie that authenticates and then never answers (a paused process looks like this)."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonce = b"n" * wire.NONCE_BYTES
        writer.writelines(wire.encode_request(Op.HELLO, 0, nonce, b"b1", b"i"))
        header = await reader.readexactly(wire.FRAME_HEADER.size)
        length = wire.FRAME_HEADER.unpack(header)[0]
        body = await reader.readexactly(length - wire.HEADER_AFTER_LENGTH)
        client_nonce, _ = wire.decode_request(Op.AUTH, memoryview(body))
        writer.writelines(wire.encode_response(Op.AUTH, 0, Status.OK,
                                               wire.bookie_proof(SECRET, nonce, bytes(client_nonce))))
        await reader.read()   # swallow requests, answer none

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    remote = RemoteBookie("b1", "127.0.0.1", port, SECRET, request_timeout_s=0.3)
    with pytest.raises(BookieUnavailable, match="timed out"):
        await remote.add(1, 0, b"a", -1)
    await remote.close()
    server.close()
    await server.wait_closed()


# --- bad input ------------------------------------------------------------------------------------


async def _raw_session(address, payload: bytes) -> bytes:
    """Send `payload` right after the HELLO and return what the bookie says until it closes."""
    reader, writer = await asyncio.open_connection(*address)
    try:
        await reader.readexactly(4)
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 5.0)
    finally:
        writer.close()


@pytest.mark.parametrize("frame", [
    struct.pack(">IBBQ", 10, 99, Op.READ, 1),                                 # unknown version
    struct.pack(">IBBQ", 1 << 30, wire.PROTOCOL_VERSION, Op.ADD, 1),           # huge frame
    struct.pack(">IBBQ", 3, wire.PROTOCOL_VERSION, Op.ADD, 1),                 # impossible length
    struct.pack(">IBBQ", 10, wire.PROTOCOL_VERSION, 200, 1),                   # unknown op
    b"".join(wire.encode_request(Op.READ, 1, 1, 0, 0)),                       # a request before AUTH
    struct.pack(">IBBQI", 14, wire.PROTOCOL_VERSION, Op.AUTH, 1, 1 << 31),     # a blob longer than the frame
])
async def test_garbage_closes_only_its_connection(served, frame):
    server, client, address = served
    bystander = client()
    await bystander.add(9, 0, b"still here", -1)
    await _raw_session(address, frame)
    assert await bystander.read(9, 0) == b"still here"
    assert len(server._connections) == 1


async def test_garbage_after_authentication_closes_the_connection(served):
    server, client, address = served
    reader, writer = await asyncio.open_connection(*address)
    header = await reader.readexactly(wire.FRAME_HEADER.size)
    body = await reader.readexactly(wire.FRAME_HEADER.unpack(header)[0] - wire.HEADER_AFTER_LENGTH)
    nonce = bytes(wire.decode_request(Op.HELLO, memoryview(body))[0])
    mine = b"c" * wire.NONCE_BYTES
    writer.writelines(wire.encode_request(Op.AUTH, 1, mine, wire.client_proof(SECRET, nonce, mine)))
    # A READ whose body has trailing bytes.
    bad = wire.encode_request(Op.READ, 2, 1, 0, 0)
    bad[0] = wire.FRAME_HEADER.pack(wire.FRAME_HEADER.unpack(bad[0])[0] + 3, wire.PROTOCOL_VERSION, Op.READ, 2)
    writer.writelines([*bad, b"xyz"])
    answer = await asyncio.wait_for(reader.read(), 5.0)   # the AUTH answer, then EOF
    assert answer and len(server._connections) == 0
    writer.close()


# --- the codec alone ------------------------------------------------------------------------------


def _values_for(fields):
    strategies = {"u8": st.integers(0, 255), "u32": st.integers(0, 2**32 - 1),
                  "i64": st.integers(-2**63, 2**63 - 1), "blob": st.binary(max_size=64),
                  "blobs": st.lists(st.binary(max_size=16), max_size=5)}
    return st.tuples(*(strategies[kind] for _, kind in fields))


def _normal(values):
    return tuple(bytes(v) if isinstance(v, memoryview) else [bytes(b) for b in v] if isinstance(v, list) else v
                 for v in values)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(wire.MESSAGES)).flatmap(
    lambda op: st.tuples(st.just(op), st.integers(0, 2**64 - 1), _values_for(wire.MESSAGES[op][0]),
                         _values_for(wire.MESSAGES[op][1]))))
def test_every_message_round_trips(case):
    op, request_id, request, response = case
    reader = wire.FrameReader()
    frames = reader.feed(b"".join(wire.encode_request(op, request_id, *request)) +
                         b"".join(wire.encode_response(op, request_id, Status.OK, *response)) +
                         b"".join(wire.encode_response(op, request_id, Status.FENCED)))
    assert [(f.op, f.request_id) for f in frames] == [(op, request_id)] * 3
    assert _normal(wire.decode_request(op, frames[0].body)) == request
    assert _normal(wire.decode_response(op, frames[1].body)) == (Status.OK, *response)
    assert wire.decode_response(op, frames[2].body) == (Status.FENCED,)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(wire.MESSAGES)), st.binary(max_size=64))
def test_truncated_or_random_bodies_never_decode_wrongly(op, body):
    """Any body either decodes into the declared fields or raises ProtocolError; nothing else."""
    for decode in (wire.decode_request, wire.decode_response):
        try:
            decode(op, memoryview(body))
        except wire.ProtocolError:
            pass


def test_a_count_beyond_the_bytes_left_is_refused_before_allocating():
    body = struct.pack(">BI", Status.OK, 2**32 - 1)
    with pytest.raises(wire.ProtocolError, match="exceeds"):
        wire.decode_response(Op.READ_RANGE, memoryview(body))


def test_frames_split_anywhere_reassemble():
    stream = b"".join(b"".join(wire.encode_request(Op.ADD, i, 1, i, i - 1, 0, b"p" * i)) for i in range(20))
    for cut in (1, 7, 13, 64):
        reader = wire.FrameReader()
        frames = []
        for start in range(0, len(stream), cut):
            frames += reader.feed(stream[start:start + cut])
        assert [f.request_id for f in frames] == list(range(20))



async def test_a_bookie_with_node_tls_serves_clients_with_a_certificate_of_its_ca_only(tmp_path):
    from gateway.cluster.certificates import cluster_certificates
    from storage.node_tls import NodeTls
    files = cluster_certificates(tmp_path / "tls")
    tls = NodeTls.load(str(files.cert), str(files.key), str(files.ca))
    strangers = cluster_certificates(tmp_path / "other-cluster")
    stranger = NodeTls.load(str(strangers.cert), str(strangers.key), str(strangers.ca))
    metadata = await SqliteMetadataStore.open(tmp_path / "metadata.db")
    bookie = await Bookie.open(tmp_path / "bookie", StorageConfig(), metadata, bookie_id="b1")
    server = BookieServer(bookie, "b1", "instance-1", SECRET, tls=tls)
    host, port = await server.start("127.0.0.1", 0)
    member = RemoteBookie("b1", host, port, SECRET, tls=tls)
    outsider = RemoteBookie("b1", host, port, SECRET, tls=stranger, connect_timeout_s=5)
    plaintext = RemoteBookie("b1", host, port, SECRET, connect_timeout_s=2)
    try:
        await member.add(3, 0, (b"head-", b"over tls"), -1)
        assert await member.read(3, 0) == b"head-over tls"
        for refused in (outsider, plaintext):
            with pytest.raises(BookieUnavailable):
                await refused.read(3, 0)
    finally:
        for remote in (member, outsider, plaintext):
            await remote.close()
        await server.close()
        await bookie.close()
        await metadata.close()

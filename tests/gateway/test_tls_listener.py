"""A TLS listener on asyncio's own event loop (the gateway runs on uvloop; both loops' TLS layers
are used the same way): only connections through their handshake reach the handler, a refusal is
counted for its listener, and a reload changes the certificate for new connections only."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from gateway.cluster.certificates import cluster_certificates
from gateway.listeners import Listener, bind_socket
from gateway.tls import ServerTls, TlsSettings


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(await reader.readexactly(4))
    await writer.drain()
    writer.close()


def client(files) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(files.ca))
    context.load_cert_chain(str(files.cert), str(files.key))
    return context


async def exchange(port: int, context: ssl.SSLContext) -> bytes:
    """What the server echoes of b"ping" (b"" if it refused the session)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1")
        writer.write(b"ping")
        answer = await reader.read(4)
        writer.close()
        return answer
    except (ssl.SSLError, ConnectionError):
        return b""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tls-listener")
    return cluster_certificates(directory / "ours"), cluster_certificates(directory / "theirs")


async def test_only_completed_handshakes_reach_the_handler_and_refusals_are_counted(files):
    ours, theirs = files
    tls = ServerTls(TlsSettings(str(ours.cert), str(ours.key), str(ours.ca), "required", 1.0))
    listener = Listener("test_tls", bind_socket("127.0.0.1", 0), echo, tls=tls)
    await listener.start()
    port = listener.sock.getsockname()[1]
    try:
        assert await exchange(port, client(ours)) == b"ping"
        assert await exchange(port, client(theirs)) == b""
        _, silent = await asyncio.open_connection("127.0.0.1", port)   # never says anything
        await asyncio.sleep(2.5)
        assert listener.failures["tls_handshake_refused"] == 2 and listener.accepted_total == 1
        silent.close()
    finally:
        listener.stop_accepting()
        await listener.close_connections(1.0)


async def test_a_reload_serves_new_connections_with_the_new_certificate(files, tmp_path):
    ours, theirs = files
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    cert.write_bytes(ours.cert.read_bytes())
    key.write_bytes(ours.key.read_bytes())
    tls = ServerTls(TlsSettings(str(cert), str(key)))
    listener = Listener("test_tls", bind_socket("127.0.0.1", 0), echo, tls=tls)
    await listener.start()
    port = listener.sock.getsockname()[1]
    trusts_ours, trusts_theirs = ssl.create_default_context(cafile=str(ours.ca)), \
        ssl.create_default_context(cafile=str(theirs.ca))
    try:
        assert await exchange(port, trusts_ours) == b"ping"
        cert.write_bytes(theirs.cert.read_bytes())
        key.write_bytes(theirs.key.read_bytes())
        assert tls.reload()
        assert await exchange(port, trusts_theirs) == b"ping"
        assert await exchange(port, trusts_ours) == b""
        cert.write_text("not a certificate")
        assert not tls.reload()   # the one in use stays
        assert await exchange(port, trusts_theirs) == b"ping"
    finally:
        listener.stop_accepting()
        await listener.close_connections(1.0)

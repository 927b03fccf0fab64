"""The TCP proxy's modes, against a small echo server that also records what reached it."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from compat_tests.faults.harness.proxy import DOWNSTREAM, UPSTREAM, TcpProxy

TIMEOUT_S = 10.0


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.server.received.append(data)
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[socketserver.ThreadingTCPServer]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    server.received = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(echo) -> Iterator[TcpProxy]:
    with TcpProxy(echo.server_address) as proxy:
        yield proxy


def connect(proxy: TcpProxy, timeout: float = TIMEOUT_S) -> socket.socket:
    return socket.create_connection(proxy.address, timeout=timeout)


def wait_until(condition, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def round_trip(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = sock.recv(65536)
        assert chunk, "closed"
        got += chunk
    return got


def test_pass_forwards_both_ways(proxy) -> None:
    with connect(proxy) as sock:
        assert round_trip(sock, b"hello" * 1000) == b"hello" * 1000
    assert proxy.stats.connections == 1
    wait_until(lambda: proxy.stats.forwarded_bytes == 10_000)


def test_drop_blackholes_open_connections_and_delivers_once_healed(proxy, echo) -> None:
    with connect(proxy) as sock:
        assert round_trip(sock, b"before") == b"before"
        proxy.drop()
        sock.sendall(b"held")
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(100)
        assert echo.received == [b"before"]
        assert proxy.stats.stalls >= 1
        proxy.heal()  # like TCP after a partition heals: what was sent arrives, in order
        sock.settimeout(TIMEOUT_S)
        assert sock.recv(100) == b"held"
        assert round_trip(sock, b"after") == b"after"
    assert b"".join(echo.received) == b"beforeheldafter"


def test_delay_holds_each_chunk_back(proxy) -> None:
    proxy.delay(150)
    with connect(proxy) as sock:
        started = time.monotonic()
        assert round_trip(sock, b"slow") == b"slow"
        assert time.monotonic() - started >= 0.3  # once each way


@pytest.mark.parametrize("flowing", [UPSTREAM, DOWNSTREAM])
def test_half_open_lets_one_direction_through(proxy, echo, flowing) -> None:
    with connect(proxy) as sock:
        proxy.half_open(flowing)
        sock.sendall(b"ping")
        if flowing == UPSTREAM:
            wait_until(lambda: echo.received == [b"ping"])  # reached the server, the echo is held
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(100)
        assert echo.received == ([b"ping"] if flowing == UPSTREAM else [])
        proxy.heal()
        sock.settimeout(TIMEOUT_S)
        assert sock.recv(100) == b"ping"


def test_reset_kills_open_connections_and_refuses_new_ones(proxy) -> None:
    with connect(proxy) as sock:
        assert round_trip(sock, b"x") == b"x"
        proxy.reset()
        with pytest.raises(ConnectionResetError):
            sock.sendall(b"y")
            sock.recv(100)
    with pytest.raises((ConnectionResetError, BrokenPipeError)), connect(proxy) as sock:
        sock.sendall(b"z")
        sock.recv(100)  # reset, not a clean end of stream (which would return b"")
    proxy.heal()
    with connect(proxy) as sock:
        assert round_trip(sock, b"back") == b"back"

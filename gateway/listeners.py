"""Client-facing TCP listeners: a listener is a name, a pre-bound socket and a connection handler.

A protocol front end plugs in by supplying the handler, an `async def handler(reader, writer)` that
serves one client connection until the client goes away or the reader reaches EOF. The listener
owns everything around it: accepting, the TLS handshake on a TLS listener (the handler then reads
and writes clear text, and finds the session under the writer's "ssl_object"), counting, and
closing connections at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.tls import ServerTls

ConnectionHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

LISTEN_BACKLOG = 1024
_ABORT_WAIT_S = 1.0  # how long to wait for cancelled handlers to unwind after the grace period


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind (but do not yet listen on) a TCP socket; port 0 lets the kernel pick a free port.

    Binding early reserves the port and reports a conflict before storage is opened; listening
    starts only once the core is up, so clients never connect to a gateway that cannot serve.
    """
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        # Lets a restarted gateway rebind while old connections sit in TIME_WAIT; on Linux it does
        # not allow binding a port another socket is listening on.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def format_address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The handler of a listener whose protocol front end is not wired in yet."""
    writer.close()
    await writer.wait_closed()


def share_close(*handlers: ConnectionHandler) -> None:
    """Handlers of several listeners over one protocol's state (its plaintext and TLS ports): the
    state is closed once, by the last listener to finish its connections, not under the others'."""
    close = getattr(handlers[0], "close")
    left = len(handlers)

    async def close_when_last() -> None:
        nonlocal left
        left -= 1
        if left == 0:
            await close()

    for handler in handlers:
        handler.close = close_when_last


class Listener:
    def __init__(self, name: str, sock: socket.socket, handler: ConnectionHandler, *,
                 tls: ServerTls | None = None) -> None:
        self.name = name
        self.tls = tls
        self.sock = sock
        self.address = format_address(sock)
        self._handler = handler
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], _Connection] = {}
        self._accepted_total = 0
        self._aborting = False  # set once shutdown cancels the handlers that outlived the grace period
        self._log = logging.getLogger(f"gateway.{name}")

    @property
    def accepted_total(self) -> int:
        return self._accepted_total

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    @property
    def failures(self) -> dict[str, int]:
        """Connections the protocol closed for a failure, by reason (what its handler counts)."""
        counts = getattr(self._handler, "failures", None)
        failures = dataclasses.asdict(counts) if dataclasses.is_dataclass(counts) else {}
        if self.tls is not None:   # never handed to the protocol: refused in the TLS handshake
            failures["tls_handshake_refused"] = self.tls.refused.get(self.name, 0)
        return failures

    async def start(self) -> None:
        self.sock.listen(LISTEN_BACKLOG)
        if self.tls is None:
            self._server = await asyncio.start_server(self._serve_connection, sock=self.sock, backlog=LISTEN_BACKLOG)
        else:   # the handler is called once the TLS handshake is through
            self._server = await asyncio.get_running_loop().create_server(
                self.tls.protocol_factory(self.name, self._serve_connection), sock=self.sock, backlog=LISTEN_BACKLOG)
        self._log.info("%s listener accepting on %s", self.name, self.address)

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()
        else:
            self.sock.close()  # never started (start-up failed): just release the port

    async def close_connections(self, grace_s: float) -> None:
        """Ask every open connection to finish, wait up to `grace_s`, then drop the stragglers.

        Asking means: stop reading from the client and give the handler EOF, exactly what it sees
        when a client disconnects, so a handler finishes its in-flight requests and returns.
        """
        for connection in self._connections.values():
            connection.end_input()
        tasks = set(self._connections)
        if tasks:
            self._log.info("%s: waiting up to %.1fs for %d connection(s) to finish", self.name, grace_s, len(tasks))
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            if pending:
                self._log.warning("%s: closing %d connection(s) still busy after %.1fs",
                                  self.name, len(pending), grace_s)
                self._aborting = True
                for task in pending:
                    self._connections[task].writer.transport.abort()
                    task.cancel()
                await asyncio.wait(pending, timeout=_ABORT_WAIT_S)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), _ABORT_WAIT_S)
        # The protocol's shared state (group coordinator, queues): saved once no connection uses it.
        close_handler = getattr(self._handler, "close", None)
        if close_handler is not None:
            await close_handler()

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = _Connection(reader, writer)
        self._accepted_total += 1
        peer = writer.get_extra_info("peername")
        self._log.debug("%s: connection from %s", self.name, peer)
        try:
            await self._handler(reader, writer)
        except asyncio.CancelledError:
            if not self._aborting:
                raise
            # Our own shutdown cancelled it: end quietly (a stream task that ends cancelled makes
            # asyncio log a spurious error).
        except Exception:
            # One broken client must not take the listener down; log it and drop that connection.
            self._log.exception("%s: connection from %s failed", self.name, peer)
        finally:
            del self._connections[task]
            writer.close()


@dataclass(frozen=True, slots=True)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def end_input(self) -> None:
        transport = self.writer.transport
        if transport.is_closing():
            return
        try:
            transport.pause_reading()  # no more data_received, so feeding EOF below is safe
        except RuntimeError:
            return
        self.reader.feed_eof()

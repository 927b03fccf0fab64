"""A bookie behind a TCP listener: serves storage/bookie/protocol.py for remote ledger clients.

Each connection is authenticated first (shared secret, protocol.py), then its requests run
concurrently: adds complete when the journal fsynced them (group commit shares one fsync among all
connections), reads in worker threads, so responses go out in completion order with their request
ids. A connection with more than `max_in_flight_bytes` of adds not yet durable stops being read
until it falls below half of that. A frame that breaks the protocol is logged once and closes that
connection only.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

from storage.api import StorageError
from storage.bookie import protocol as wire
from storage.bookie.bookie import Bookie
from storage.bookie.protocol import AddFlag, Op, ReadFlag, Status
from storage.node_tls import HANDSHAKE_TIMEOUT_S, NodeTls

log = logging.getLogger("gateway.storage.bookie.server")

DEFAULT_MAX_IN_FLIGHT_BYTES = 64 << 20
MAX_LONG_POLL_S = 60.0


class BookieServer:
    def __init__(self, bookie: Bookie, bookie_id: str, instance_id: str, secret: bytes, *,
                 max_frame_bytes: int = wire.DEFAULT_MAX_FRAME_BYTES,
                 max_in_flight_bytes: int = DEFAULT_MAX_IN_FLIGHT_BYTES, tls: NodeTls | None = None) -> None:
        """`tls`: accept only clients with a certificate of the cluster's CA (then the secret too)."""
        if not secret:
            raise ValueError("a bookie needs a shared secret")
        self.bookie = bookie
        self.bookie_id = bookie_id
        self.instance_id = instance_id
        self._secret = secret
        self._max_frame_bytes = max_frame_bytes
        self._max_in_flight_bytes = max_in_flight_bytes
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._tls = tls

    async def start(self, host: str, port: int) -> tuple[str, int]:
        tls = {} if self._tls is None else {"ssl": self._tls.server, "ssl_handshake_timeout": HANDSHAKE_TIMEOUT_S}
        self._server = await asyncio.get_running_loop().create_server(lambda: _Connection(self), host, port, **tls)
        return self._server.sockets[0].getsockname()[:2]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.close()
        if self._server is not None:
            await self._server.wait_closed()


class _Connection(asyncio.Protocol):
    def __init__(self, server: BookieServer) -> None:
        self._server = server
        self._bookie = server.bookie
        self._reader = wire.FrameReader(server._max_frame_bytes)
        self._transport: asyncio.Transport | None = None
        self._nonce = os.urandom(wire.NONCE_BYTES)
        self._authenticated = False
        self._peer = "?"
        self._in_flight_bytes = 0
        self._paused = False
        self._tasks: set[asyncio.Task] = set()
        self._handlers: dict[Op, Callable] = {
            Op.READ: self._read, Op.READ_RANGE: self._read_range, Op.FENCE: self._fence,
            Op.READ_LAC: self._read_lac, Op.DELETE_LEDGER: self._delete_ledger, Op.WRITE_LAC: self._write_lac,
        }

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._peer = "%s:%s" % (transport.get_extra_info("peername") or ("?", "?"))[:2]
        self._server._connections.add(self)
        self._send(wire.encode_request(Op.HELLO, 0, self._nonce, self._server.bookie_id.encode(),
                                       self._server.instance_id.encode()))

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._connections.discard(self)
        self._transport = None
        for task in self._tasks:
            task.cancel()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        try:
            for frame in self._reader.feed(data):
                if self._transport is None:
                    return
                self._dispatch(frame)
        except wire.ProtocolError as exc:
            log.warning("bookie connection from %s closed: %s", self._peer, exc)
            self.close()

    def _dispatch(self, frame: wire.Frame) -> None:
        if not self._authenticated:
            if frame.op is not Op.AUTH:
                raise wire.ProtocolError(f"{frame.op.name} before authentication")
            self._authenticate(frame)
            return
        values = wire.decode_request(frame.op, frame.body)
        if frame.op is Op.ADD:
            self._add(frame.request_id, *values)
            return
        handler = self._handlers.get(frame.op)
        if handler is None:
            raise wire.ProtocolError(f"{frame.op.name} is not a request")
        task = asyncio.ensure_future(self._answer(frame.op, frame.request_id, handler(*values)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _authenticate(self, frame: wire.Frame) -> None:
        client_nonce, proof = wire.decode_request(Op.AUTH, frame.body)
        client_nonce = bytes(client_nonce)
        expected = wire.client_proof(self._server._secret, self._nonce, client_nonce)
        if len(client_nonce) != wire.NONCE_BYTES or not wire.proofs_equal(proof, expected):
            log.warning("bookie connection from %s refused: wrong shared secret", self._peer)
            self._send(wire.encode_response(Op.AUTH, frame.request_id, Status.UNAUTHORIZED))
            self.close()
            return
        self._authenticated = True
        self._send(wire.encode_response(Op.AUTH, frame.request_id, Status.OK,
                                        wire.bookie_proof(self._server._secret, self._nonce, client_nonce)))

    # --- requests -------------------------------------------------------------------------------

    def _add(self, request_id: int, ledger_id: int, entry_id: int, lac: int, flags: int, payload: memoryview) -> None:
        size = len(payload)
        self._in_flight_bytes += size
        if self._in_flight_bytes > self._server._max_in_flight_bytes and not self._paused:
            self._paused = True
            self._transport.pause_reading()
        durable = self._bookie.add(ledger_id, entry_id, payload, lac, recovery=bool(flags & AddFlag.RECOVERY))
        durable.add_done_callback(lambda done: self._added(request_id, size, done))

    def _added(self, request_id: int, size: int, done: asyncio.Future) -> None:
        self._in_flight_bytes -= size
        if self._paused and self._in_flight_bytes <= self._server._max_in_flight_bytes // 2:
            self._paused = False
            if self._transport is not None:
                self._transport.resume_reading()
        error = done.exception()
        status = Status.OK if error is None else wire.status_of(error)
        if error is not None:
            self._bookie.stats.failed(Op.ADD.name, status.name)
        self._send(wire.encode_response(Op.ADD, request_id, status))

    async def _answer(self, op: Op, request_id: int, work) -> None:
        try:
            values = await work
        except StorageError as exc:
            self._bookie.stats.failed(op.name, wire.status_of(exc).name)
            self._send(wire.encode_response(op, request_id, wire.status_of(exc)))
            return
        except Exception:
            log.exception("bookie %s failed on %s", self._server.bookie_id, op.name)
            self._bookie.stats.failed(op.name, Status.INTERNAL_ERROR.name)
            self._send(wire.encode_response(op, request_id, Status.INTERNAL_ERROR))
            return
        self._send(wire.encode_response(op, request_id, Status.OK, *values))

    async def _read(self, ledger_id: int, entry_id: int, flags: int) -> tuple:
        payload = await self._bookie.read(ledger_id, entry_id, fence=bool(flags & ReadFlag.FENCE))
        return self._bookie_lac(ledger_id), payload

    async def _read_range(self, ledger_id: int, first: int, last: int, max_bytes: int) -> tuple:
        return (await self._bookie.read_range(ledger_id, first, last, max_bytes),)

    async def _fence(self, ledger_id: int) -> tuple:
        last_entry_id = await self._bookie.fence(ledger_id)
        return last_entry_id, self._bookie_lac(ledger_id)

    async def _read_lac(self, ledger_id: int, after: int, timeout_ms: int) -> tuple:
        return (await self._bookie.wait_lac(ledger_id, after, min(timeout_ms / 1000, MAX_LONG_POLL_S)),)

    async def _write_lac(self, ledger_id: int, lac: int) -> tuple:
        await self._bookie.write_lac(ledger_id, lac)
        return ()

    async def _delete_ledger(self, ledger_id: int) -> tuple:
        await self._bookie.delete_ledger(ledger_id)
        return ()

    def _bookie_lac(self, ledger_id: int) -> int:
        return self._bookie.lac_of(ledger_id)

    def _send(self, parts: list) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.writelines(parts)

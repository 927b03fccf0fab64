"""A remote bookie as a ledger client sees it: the EntryStore interface over one TCP connection.

Requests are pipelined on the connection and matched to responses by request id, so thousands of
adds may be in flight. The connection is made on first use and again after it broke; until
`reconnect_backoff_s` has passed since a failed attempt, requests fail at once with
BookieUnavailable instead of waiting on a dead peer (the ledger writer then replaces the bookie).
Every request has a deadline; one that passes it fails with BookieUnavailable, which for an add is
ambiguous (the entry may be stored), exactly like a lost connection.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Sequence

from storage.api import BookieUnavailable, CookieMismatch, StorageError
from storage.bookie import protocol as wire
from storage.bookie.protocol import AddFlag, Op, ReadFlag, Status
from storage.node_tls import NodeTls

log = logging.getLogger("gateway.storage.bookie.remote")

DEFAULT_REQUEST_TIMEOUT_S = 5.0
DEFAULT_CONNECT_TIMEOUT_S = 2.0
DEFAULT_RECONNECT_BACKOFF_S = 1.0
_SWEEP_INTERVAL_S = 0.25


class RemoteBookie:
    """EntryStore of one bookie server. Used from one event loop."""

    def __init__(self, bookie_id: str, host: str, port: int, secret: bytes, *,
                 request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 reconnect_backoff_s: float = DEFAULT_RECONNECT_BACKOFF_S,
                 max_frame_bytes: int = wire.DEFAULT_MAX_FRAME_BYTES, tls: NodeTls | None = None) -> None:
        self.bookie_id = bookie_id
        self._tls = tls   # connect with the node's certificate, to a bookie showing one of the CA
        self.address = (host, port)
        self._secret = secret
        self._request_timeout_s = request_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._reconnect_backoff_s = reconnect_backoff_s
        self._max_frame_bytes = max_frame_bytes
        self._connection: _ClientConnection | None = None
        self._connecting: asyncio.Future | None = None
        self._failed_at = -1e9
        self._last_error = ""
        self._next_id = 1
        self._closed = False

    def __repr__(self) -> str:
        return f"RemoteBookie({self.bookie_id}@{self.address[0]}:{self.address[1]})"

    # --- EntryStore -----------------------------------------------------------------------------

    def add(self, ledger_id: int, entry_id: int, payload, lac: int, *, recovery: bool = False) -> asyncio.Future:
        flags = AddFlag.RECOVERY if recovery else 0
        return self._request(Op.ADD, (ledger_id, entry_id, lac, flags, payload), self._request_timeout_s)

    async def read(self, ledger_id: int, entry_id: int, *, fence: bool = False) -> bytes:
        flags = ReadFlag.FENCE if fence else 0
        _, payload = await self._request(Op.READ, (ledger_id, entry_id, flags), self._request_timeout_s)
        return payload

    async def read_with_lac(self, ledger_id: int, entry_id: int, *, fence: bool = False) -> tuple[int, bytes]:
        flags = ReadFlag.FENCE if fence else 0
        return tuple(await self._request(Op.READ, (ledger_id, entry_id, flags), self._request_timeout_s))

    async def read_range(self, ledger_id: int, first_entry_id: int, last_entry_id: int, max_bytes: int) -> list:
        max_bytes = min(max_bytes, self._max_frame_bytes // 2)
        (entries,) = await self._request(Op.READ_RANGE, (ledger_id, first_entry_id, last_entry_id, max_bytes),
                                         self._request_timeout_s)
        return entries

    async def read_entries(self, ledger_id: int, entry_ids: list[int]) -> list[bytes]:
        """Pipelined on the one connection: a round trip for all of them."""
        return list(await asyncio.gather(*(self.read(ledger_id, entry_id) for entry_id in entry_ids)))

    async def fence(self, ledger_id: int) -> int:
        last_entry_id, _ = await self._request(Op.FENCE, (ledger_id,), self._request_timeout_s)
        return last_entry_id

    async def fence_with_lac(self, ledger_id: int) -> tuple[int, int]:
        """Fence; (last entry id stored, LAC seen) on this bookie."""
        return tuple(await self._request(Op.FENCE, (ledger_id,), self._request_timeout_s))

    async def last_add_confirmed(self, ledger_id: int) -> int:
        (lac,) = await self._request(Op.READ_LAC, (ledger_id, -1, 0), self._request_timeout_s)
        return lac

    async def wait_lac(self, ledger_id: int, after: int, timeout_s: float) -> int:
        timeout_ms = max(0, int(timeout_s * 1000))
        (lac,) = await self._request(Op.READ_LAC, (ledger_id, after, timeout_ms),
                                     timeout_s + self._request_timeout_s)
        return lac

    async def write_lac(self, ledger_id: int, lac: int) -> None:
        await self._request(Op.WRITE_LAC, (ledger_id, lac), self._request_timeout_s)

    async def delete_ledger(self, ledger_id: int) -> None:
        await self._request(Op.DELETE_LEDGER, (ledger_id,), self._request_timeout_s)

    async def close(self) -> None:
        self._closed = True
        if self._connection is not None:
            self._connection.abort(BookieUnavailable(f"bookie {self.bookie_id}: client closed"))
            self._connection = None

    # --- requests -------------------------------------------------------------------------------

    def _request(self, op: Op, values: Sequence, timeout_s: float) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        request_id = self._next_id
        self._next_id += 1
        connection = self._connection
        if connection is not None and connection.ready:
            connection.send(op, request_id, values, future, timeout_s)
            return future
        if self._closed:
            future.set_exception(BookieUnavailable(f"bookie {self.bookie_id}: client closed"))
            return future
        if time.monotonic() - self._failed_at < self._reconnect_backoff_s:
            future.set_exception(BookieUnavailable(f"bookie {self.bookie_id}: {self._last_error}"))
            return future
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect())
        self._connecting.add_done_callback(
            lambda connected: self._send_when_connected(connected, op, request_id, values, future, timeout_s))
        return future

    def _send_when_connected(self, connected: asyncio.Future, op: Op, request_id: int, values: Sequence,
                             future: asyncio.Future, timeout_s: float) -> None:
        if future.done():
            return
        connection = None if connected.cancelled() or connected.exception() else connected.result()
        if connection is None or not connection.ready:
            future.set_exception(BookieUnavailable(f"bookie {self.bookie_id}: {self._last_error}"))
            return
        connection.send(op, request_id, values, future, timeout_s)

    async def _connect(self) -> "_ClientConnection | None":
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(lambda: _ClientConnection(self), *self.address,
                                       **({} if self._tls is None else
                                          {"ssl": self._tls.client, "server_hostname": self.address[0]})),
                self._connect_timeout_s)
            await asyncio.wait_for(connection.handshake, self._connect_timeout_s)
        except (OSError, asyncio.TimeoutError, StorageError) as exc:
            self._failed_at = time.monotonic()
            self._last_error = str(exc) or type(exc).__name__
            log.info("bookie %s at %s:%d unreachable: %s", self.bookie_id, *self.address, self._last_error)
            return None
        finally:
            self._connecting = None
        if self._closed:
            connection.abort(BookieUnavailable("client closed"))
            return None
        self._connection = connection
        return connection

    def _lost(self, connection: "_ClientConnection", reason: str) -> None:
        if self._connection is connection:
            self._connection = None
            self._failed_at = time.monotonic()
            self._last_error = reason


class _ClientConnection(asyncio.Protocol):
    def __init__(self, owner: RemoteBookie) -> None:
        self._owner = owner
        self._reader = wire.FrameReader(owner._max_frame_bytes)
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, tuple[Op, asyncio.Future, float]] = {}
        self._nonce = os.urandom(wire.NONCE_BYTES)
        self._server_nonce = b""
        self.handshake: asyncio.Future = asyncio.get_running_loop().create_future()
        self.ready = False
        self._sweeper: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.abort(BookieUnavailable(f"bookie {self._owner.bookie_id}: connection lost ({exc or 'closed'})"))

    def abort(self, error: StorageError) -> None:
        self.ready = False
        if self._transport is not None:
            self._transport.abort()
            self._transport = None
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if not self.handshake.done():
            self.handshake.set_exception(error)
        pending, self._pending = self._pending, {}
        for _, future, _ in pending.values():
            if not future.done():
                future.set_exception(error)
        self._owner._lost(self, str(error))

    def send(self, op: Op, request_id: int, values: Sequence, future: asyncio.Future, timeout_s: float) -> None:
        self._pending[request_id] = (op, future, time.monotonic() + timeout_s)
        self._transport.writelines(wire.encode_request(op, request_id, *values))

    def data_received(self, data: bytes) -> None:
        try:
            for frame in self._reader.feed(data):
                if not self.ready:
                    self._handshake_step(frame)
                    continue
                entry = self._pending.pop(frame.request_id, None)
                if entry is None:
                    continue  # answered after its deadline passed: already failed
                op, future, _ = entry
                if op is not frame.op:
                    raise wire.ProtocolError(f"response {frame.op.name} to a {op.name} request")
                values = wire.decode_response(op, frame.body)
                if future.done():
                    continue
                status = values[0]
                if status is Status.OK:
                    future.set_result(values[1:])
                else:
                    future.set_exception(wire.error_of(status, f"bookie {self._owner.bookie_id} {op.name}"))
        except wire.ProtocolError as exc:
            log.warning("bookie %s sent a bad frame: %s", self._owner.bookie_id, exc)
            self.abort(BookieUnavailable(f"bookie {self._owner.bookie_id}: {exc}"))

    def _handshake_step(self, frame: wire.Frame) -> None:
        owner = self._owner
        if frame.op is Op.HELLO and not self._server_nonce:
            nonce, bookie_id, _instance = wire.decode_request(Op.HELLO, frame.body)
            if bytes(bookie_id).decode(errors="replace") != owner.bookie_id:
                self.abort(CookieMismatch(f"{owner.address[0]}:{owner.address[1]} is bookie "
                                          f"{bytes(bookie_id).decode(errors='replace')}, not {owner.bookie_id}"))
                return
            self._server_nonce = bytes(nonce)
            proof = wire.client_proof(owner._secret, self._server_nonce, self._nonce)
            self._transport.writelines(wire.encode_request(Op.AUTH, 0, self._nonce, proof))
            return
        if frame.op is Op.AUTH and self._server_nonce:
            values = wire.decode_response(Op.AUTH, frame.body)
            expected = wire.bookie_proof(owner._secret, self._server_nonce, self._nonce)
            if values[0] is not Status.OK or not wire.proofs_equal(values[1], expected):
                self.abort(BookieUnavailable(f"bookie {owner.bookie_id}: authentication failed (shared secret)"))
                return
            self.ready = True
            self._sweeper = asyncio.get_running_loop().call_later(_SWEEP_INTERVAL_S, self._sweep)
            self.handshake.set_result(None)
            return
        raise wire.ProtocolError(f"unexpected {frame.op.name} during the handshake")

    def _sweep(self) -> None:
        """Fail requests past their deadline (one timer for the connection, not one per request)."""
        now = time.monotonic()
        expired = [request_id for request_id, (_, _, deadline) in self._pending.items() if deadline <= now]
        for request_id in expired:
            op, future, _ = self._pending.pop(request_id)
            if not future.done():
                future.set_exception(BookieUnavailable(f"bookie {self._owner.bookie_id}: {op.name} timed out"))
        self._sweeper = asyncio.get_running_loop().call_later(_SWEEP_INTERVAL_S, self._sweep)

"""Links between the brokers of a cluster, for what one broker's clients need done to state another
broker serves on the data path (messages published into its queues). The mailbox in the metadata
store (core/cluster/mailbox.py) carries what must outlive both brokers; it costs several ZooKeeper
writes per request, which a publish cannot pay.

Each broker listens on its peer address (registered with it, BrokerInfo.peer) and opens at most one
link to each other broker, on first use and again after it broke. Frames: core/cluster/peer_frames.py.
Requests on a link are pipelined and answered as they complete, so concurrent requests are not
ordered: a caller that needs order has one request in flight at a time. A link that breaks fails its
requests with StorageUnavailable: what they asked for may or may not have been done.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Awaitable, Callable

from core.cluster import peer_frames as frames
from core.cluster.members import BrokerInfo
from core import errors
from core.errors import CoreError, NotSent, RequestRefused, StorageUnavailable

log = logging.getLogger("gateway.cluster.peers")

Handler = Callable[[dict, bytes, "PeerConnection"], Awaitable[tuple[dict, bytes]]]


class PeerConnection:
    """A link another broker opened to this one, as its request handlers see it: state they keep for
    that broker (its consumers, what it holds) is dropped by `on_close` callbacks."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._on_close: list[Callable[[], None]] = []

    def on_close(self, callback: Callable[[], None]) -> None:
        self._on_close.append(callback)

    def closed(self) -> None:
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("cleaning up after a peer link failed")

REQUEST_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 5.0
HANDSHAKE_TIMEOUT_S = 10.0


async def _read_frame(reader: asyncio.StreamReader, limit: int = frames.MAX_FRAME_BYTES) -> tuple[int, dict, bytes]:
    length = frames.frame_length(await reader.readexactly(4), limit)
    return frames.decode(await reader.readexactly(length))


class PeerService:
    """Answers the requests of the other brokers (`handle`) and asks them (`ask`)."""

    def __init__(self, secret: bytes, *, tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None) -> None:
        """`tls`: (server, client) contexts of mutual TLS between the brokers (storage/node_tls.py);
        the secret's handshake runs inside it as a second factor."""
        if not secret:
            raise ValueError("peer links need the cluster's shared secret")
        self._secret = secret
        self._tls = tls
        self._handlers: dict[str, Handler] = {}
        self._server: asyncio.AbstractServer | None = None
        self._links: dict[str, _Link] = {}           # peer address -> link
        self._served: set[asyncio.Task] = set()
        self._connections = 0

    def handle(self, kind: str, handler: Handler) -> None:
        """`handler(head, payload, connection) -> (head, payload)` answers requests of `kind`; a
        CoreError it raises is the answer (retriable or not, as the error says)."""
        self._handlers[kind] = handler

    # --- listening --------------------------------------------------------------------------------

    async def start(self, sock) -> None:
        tls = {} if self._tls is None else {"ssl": self._tls[0], "ssl_handshake_timeout": HANDSHAKE_TIMEOUT_S}
        self._server = await asyncio.start_server(self._serve, sock=sock, **tls)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in self._links.values():
            link.close(StorageUnavailable("peer links closed"))
        self._links.clear()
        for task in list(self._served):
            task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._served.add(task)
        self._connections += 1
        connection = PeerConnection(f"{self._connections}")
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                nonce = os.urandom(frames.NONCE_BYTES)
                writer.writelines(frames.encode(0, {"nonce": nonce.hex()}))
                _, hello, _ = await _read_frame(reader, frames.HANDSHAKE_FRAME_BYTES)
                theirs = bytes.fromhex(hello.get("nonce", ""))
                if not frames.proof_matches(self._secret, nonce, theirs, hello.get("proof")):
                    log.warning("a peer link from %s failed authentication", writer.get_extra_info("peername"))
                    return
                writer.writelines(frames.encode(0, {"proof": frames.proof(self._secret, theirs, nonce)}))
            while True:
                request_id, head, payload = await _read_frame(reader)
                answering = asyncio.ensure_future(self._answer(writer, request_id, head, payload, connection))
                self._served.add(answering)
                answering.add_done_callback(self._served.discard)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass     # close(): ends quietly (asyncio logs a cancelled connection task as an error)
        except (frames.FrameError, ValueError, TypeError) as exc:
            log.warning("peer link from %s closed: %s", writer.get_extra_info("peername"), exc)
        finally:
            self._served.discard(task)
            writer.close()
            connection.closed()

    async def _answer(self, writer: asyncio.StreamWriter, request_id: int, head: dict, payload: bytes,
                      connection: PeerConnection) -> None:
        handler = self._handlers.get(head.get("kind"))
        answer_payload = b""
        try:
            if handler is None:
                raise RequestRefused(f"no handler for peer requests of kind {head.get('kind')!r}")
            answer, answer_payload = await handler(head, payload, connection)
        except CoreError as exc:    # carried whole: the asking broker raises the same error
            answer = {"error": exc.args[0] if exc.args else "", "type": type(exc).__name__,
                      "retriable": exc.retriable,
                      "resource": None if exc.resource is None else [exc.resource.kind, exc.resource.name]}
        except Exception as exc:     # a bug: refused, so that the asking broker does not wait for it
            log.exception("answering a peer request of kind %s failed", head.get("kind"))
            answer = {"error": f"{type(exc).__name__}: {exc}", "retriable": False}
        try:
            frame = frames.encode(request_id, answer, answer_payload)
        except frames.FrameError as exc:
            log.error("the answer to a peer request of kind %s is too large: %s", head.get("kind"), exc)
            frame = frames.encode(request_id, {"error": str(exc), "retriable": False})
        if not writer.is_closing():
            writer.writelines(frame)

    # --- asking -----------------------------------------------------------------------------------

    async def ask(self, broker: BrokerInfo, head: dict, payload: bytes = b"",
                  timeout_s: float = REQUEST_TIMEOUT_S) -> tuple[dict, bytes]:
        """Send a request to `broker` and return its answer (head, payload). A refusal raises
        NotOwner (the broker does not serve what was asked: nothing was done), RequestRefused, or
        StorageUnavailable when it is retriable, as does a broken link (done or not: unknown);
        NotSent when no link could be made."""
        if not broker.peer:
            raise NotSent(f"broker {broker.id} has no peer address (an older version?)")
        link = self._links.get(broker.peer)
        if link is None or link.broken:
            link = self._links[broker.peer] = _Link(broker, self._secret, None if self._tls is None else self._tls[1])
        answer, answer_payload = await link.ask(head, payload, timeout_s)
        if "error" in answer:
            raise _error_of(answer, broker)
        return answer, answer_payload


def _error_of(answer: dict, broker: BrokerInfo) -> CoreError:
    """The CoreError another broker answered with, as it raised it there."""
    error_class = getattr(errors, str(answer.get("type")), None)
    if not (isinstance(error_class, type) and issubclass(error_class, CoreError)) or error_class is CoreError:
        error_class = StorageUnavailable if answer.get("retriable") else RequestRefused
        return error_class(f"broker {broker.id}: {answer['error']}")
    error = error_class(answer["error"])
    if answer.get("resource"):
        error.resource = errors.Resource(*answer["resource"])
    return error


class _Link:
    """One connection to one broker: requests pipelined, answers matched by request id."""

    def __init__(self, broker: BrokerInfo, secret: bytes, tls: ssl.SSLContext | None = None) -> None:
        self._tls = tls
        self._broker = broker
        self._secret = secret
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._next_id = 1
        self._connected = asyncio.ensure_future(self._connect())
        self._connected.add_done_callback(lambda done: done.cancelled() or done.exception())
        self.broken = False

    async def _connect(self) -> None:
        host, _, port = self._broker.peer.rpartition(":")
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S + HANDSHAKE_TIMEOUT_S):
                reader, writer = await asyncio.open_connection(
                    host, int(port), **({} if self._tls is None else {"ssl": self._tls, "server_hostname": host}))
                _, hello, _ = await _read_frame(reader, frames.HANDSHAKE_FRAME_BYTES)
                theirs, nonce = bytes.fromhex(hello["nonce"]), os.urandom(frames.NONCE_BYTES)
                writer.writelines(frames.encode(0, {"nonce": nonce.hex(),
                                                    "proof": frames.proof(self._secret, theirs, nonce)}))
                _, answer, _ = await _read_frame(reader, frames.HANDSHAKE_FRAME_BYTES)
                if not frames.proof_matches(self._secret, nonce, theirs, answer.get("proof")):
                    writer.close()
                    raise StorageUnavailable(f"broker {self._broker.id} failed the peer link's authentication")
        except (OSError, TimeoutError, asyncio.IncompleteReadError, frames.FrameError, KeyError, ValueError) as exc:
            self.close(NotSent(f"cannot link to broker {self._broker.id} at {self._broker.peer}: "
                                          f"{exc or type(exc).__name__}"))
            raise self._error from None
        self._writer = writer
        reading = asyncio.ensure_future(self._read(reader))
        reading.add_done_callback(lambda done: done.cancelled() or done.exception())

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                request_id, head, payload = await _read_frame(reader)
                future = self._pending.pop(request_id, None)
                if future is not None and not future.done():
                    future.set_result((head, payload))
        except (asyncio.IncompleteReadError, ConnectionError, frames.FrameError, ValueError) as exc:
            self.close(StorageUnavailable(f"link to broker {self._broker.id} lost: {exc or type(exc).__name__}"))

    async def ask(self, head: dict, payload: bytes, timeout_s: float) -> tuple[dict, bytes]:
        if not self._connected.done():
            await asyncio.shield(self._connected)
        if self.broken:
            raise self._error
        request_id = self._next_id
        self._next_id += 1
        try:
            frame = frames.encode(request_id, head, payload)
        except frames.FrameError as exc:
            raise RequestRefused(f"cannot send to broker {self._broker.id}: {exc}") from None
        if self._writer.is_closing():
            # The connection went and the reader has not seen it yet: nothing is sent, asking again is safe.
            self.close(StorageUnavailable(f"link to broker {self._broker.id} lost"))
            raise NotSent(f"link to broker {self._broker.id} lost before the request was sent")
        future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self._writer.writelines(frame)
        try:
            async with asyncio.timeout(timeout_s):
                return await future
        except TimeoutError:
            raise StorageUnavailable(f"broker {self._broker.id} did not answer in {timeout_s:.0f} s") from None
        finally:
            self._pending.pop(request_id, None)

    def close(self, error: CoreError) -> None:
        if self.broken:
            return
        self.broken = True
        self._error = error
        if self._writer is not None:
            self._writer.close()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()

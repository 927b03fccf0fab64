"""The asyncio adapter: bytes from the socket into the connection machine, requests to handlers,
responses back in request order.

Requests are handled one after another, in order, as a Kafka broker does; a handler may return an
awaitable instead of a response (Produce does, once its batches are queued for storage), so the
next request is read while earlier ones wait for durability. Responses are written strictly in
request order by one sender task per connection; a ready response with none before it still to be
written is written by the reader itself, which saves waking the sender for most requests.

Back-pressure: at most MAX_PENDING responses may wait for the sender; past that the connection is
not read, and the sender waits in `drain()` while the peer does not read what was written. So a
fast producer or a peer that never reads holds at most MAX_PENDING responses plus the transport's
write buffer, and the kernel's socket buffers push back on the client.

Failures: a peer that breaks the protocol, or a request a handler fails on (a gateway bug), closes
that connection only, after one log line naming the peer, client id, API and reason, and is counted
in the handler's `failures`. Responses already queued are still sent when the reader fails; if the
sender fails, the connection is aborted at once, which also ends the reader.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any

from core.certificates import describe_tls
from core.connections import ClientConnection, peer_address
from core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT
from core.trace import CURRENT_CLIENT
from protocols.kafka import registry
from protocols.kafka.broker import ConnectionSession, KafkaBroker, KafkaSettings, RequestContext
from protocols.kafka.certificate_login import MECHANISM as CERTIFICATE_MECHANISM, certificate_login
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.codec.frames import RequestHeader
from protocols.kafka.machine.connection import (KafkaServerConnection, RemoteProtocolError, RequestReceived,
                                                UnsupportedApiVersions)
from protocols.kafka.principal_rules import Rule
from protocols.kafka.schema.api_versions import API_VERSIONS
from protocols.kafka.schema.sasl_authenticate import SASL_AUTHENTICATE
from protocols.kafka.schema.sasl_handshake import SASL_HANDSHAKE
from protocols.kafka.throttle import PRODUCE_KEY, QUOTA_KEYS, namespace_throttle_ms, throttle_ms

log = logging.getLogger("gateway.kafka")

MAX_PENDING = 32
FAILED_AUTHENTICATION_DELAY_S = 0.1
READ_BYTES = 256 * 1024

_END = object()  # queued after the last response: the sender stops there

# What is queued per request: the framed response, None (no response: acks=0 Produce) or the
# handler's awaitable of a response body, which the sender awaits and encodes in request order.
Response = bytes | None | Awaitable[Any]


def make_broker(core, settings: KafkaSettings, *, tokens=None) -> KafkaBroker:
    return KafkaBroker(core, settings, registry.advertised(), tokens=tokens)


@dataclass(slots=True)
class ConnectionFailures:
    """How many connections were closed for a failure, by kind (read by tests and metrics)."""

    protocol_errors: int = 0   # the peer broke the protocol
    internal_errors: int = 0   # a handler, an encoder or the machine failed: a gateway bug


@dataclass(frozen=True, slots=True)
class TlsListener:
    """What a connection on the TLS listener is told and how it logs in: `principal_rules` when
    client certificates are the logins (no SASL), else None."""

    principal_rules: tuple[Rule, ...] | None = None


class KafkaConnectionHandler:
    """The listener's connection handler: serves each accepted connection with a KafkaConnection."""

    def __init__(self, broker: KafkaBroker, handlers: Mapping[int, registry.Handler] | None = None, *,
                 tls: TlsListener | None = None) -> None:
        self.broker = broker
        self.handlers = registry.HANDLERS if handlers is None else handlers
        self.failures = ConnectionFailures()
        self.tls = tls

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await KafkaConnection(self.broker, reader, writer, handlers=self.handlers, failures=self.failures,
                              tls=self.tls).run()

    async def close(self) -> None:
        """Once no connection is left: stop the broker's background work (group timers)."""
        self.broker.close()


def connection_handler(broker: KafkaBroker, tls: TlsListener | None = None) -> KafkaConnectionHandler:
    return KafkaConnectionHandler(broker, tls=tls)


class HandlerFailed(Exception):
    """Handling `request` raised (the cause); the connection is closed."""

    def __init__(self, header: RequestHeader, api_name: str) -> None:
        super().__init__(f"{api_name} v{header.api_version} failed")
        self.header = header
        self.api_name = api_name


class _SendingStopped(Exception):
    """The sender task ended early (it logged why): reading on is pointless."""


class KafkaConnection:
    def __init__(self, broker: KafkaBroker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 handlers: Mapping[int, registry.Handler] | None = None,
                 failures: ConnectionFailures | None = None, tls: TlsListener | None = None) -> None:
        self._broker = broker
        self._reader = reader
        self._writer = writer
        self._handlers = registry.HANDLERS if handlers is None else handlers
        self._failures = failures if failures is not None else ConnectionFailures()
        self._conn = KafkaServerConnection(registry.APIS, broker.settings.limits,
                                           requires_auth=bool(broker.settings.sasl_mechanisms))
        self._pending: asyncio.Queue[object] = asyncio.Queue(MAX_PENDING)
        self._peer = writer.get_extra_info("peername")
        self._session = ConnectionSession(client_host=self._peer[0] if isinstance(self._peer, tuple) else None)
        self._tls = tls
        if tls is not None:
            self._session.tls = True
            self._session.certificate_login = tls.principal_rules is not None
        self._sender: asyncio.Task[None] | None = None
        self._sender_holds = False   # the sender took a response from the queue and has not written it yet
        self._failed = False   # a failure was logged and counted: the connection's one log line
        self._throttled_until = 0.0   # loop time before which nothing more is read (quota exceeded)
        self._session.client = ClientConnection("kafka", peer_address(self._peer), self._close_for_operator,
                                                tls=describe_tls(writer.get_extra_info("ssl_object")))
        self._registry = getattr(broker.core, "connections", None)   # None: a broker without a core (tests)
        self._meter = None   # the namespace's meter, looked up on the first Produce/Fetch
        if self._registry is not None:
            self._registry.add(self._session.client)

    @property
    def pending_responses(self) -> int:
        """Responses queued for the sender (at most MAX_PENDING)."""
        return self._pending.qsize()

    async def run(self) -> None:
        CURRENT_CLIENT.set(self._session.client)   # who this task's appends and reads are for (core/trace.py)
        self._sender = asyncio.create_task(self._send_responses(), name=f"kafka-send {self._peer}")
        try:
            try:
                if not self._session.certificate_login or await self._log_in_by_certificate():
                    await self._read_requests()
            except RemoteProtocolError as exc:
                self._failed = True
                self._failures.protocol_errors += 1
                log.warning("closing Kafka connection from %s (%s): %s", self._peer, _describe(exc.header), exc)
            except HandlerFailed as exc:
                self._internal_error(exc)
            except (ConnectionError, asyncio.IncompleteReadError, _SendingStopped):
                pass  # the peer went away, or the sender failed and said why
            except Exception as exc:
                self._internal_error(exc)
            await self._finish_sending()
        finally:
            if self._registry is not None:
                self._registry.remove(self._session.client)
            if not self._sender.done():
                self._sender.cancel()   # cancelled from outside (shutdown): drop what is queued
            self._discard_queued()
            self._writer.close()

    def _close_for_operator(self, reason: str) -> None:
        # Kafka has no way to tell a client why: drop the connection, as a broker does for a
        # re-authentication that fails (KIP-368).
        log.info("closing Kafka connection from %s: %s", self._peer, reason)
        self._writer.transport.abort()

    # --- reading ----------------------------------------------------------------------------------

    async def _read_requests(self) -> None:
        while True:
            data = await self._reader.read(READ_BYTES)
            if self._sender.done():
                raise _SendingStopped
            for event in self._conn.receive_data(data):
                if self._session.expires_at is not None and self._login_expired(event):
                    return
                if self._throttled_until:
                    await self._wait_out_throttle()
                response = await self._respond(event)
                if not self._wrote_at_once(response):
                    await self._enqueue((event, response))
                if self._session.authenticated and not self._conn.authenticated:
                    self._session.client.mechanism = self._session.mechanism
                    if not await self._logged_in(stored=self._session.stored_user):
                        return
                if self._session.close_after_response:
                    # A failed login: as Kafka (connection.failed.authentication.delay.ms), answer
                    # after a short delay, then close.
                    await asyncio.sleep(FAILED_AUTHENTICATION_DELAY_S)
                    return
            if not data:
                return

    def _login_expired(self, event: RequestReceived | UnsupportedApiVersions) -> bool:
        """Past its session lifetime (KIP-368) a connection may only re-authenticate; any other
        request closes it unanswered, as Kafka does."""
        if time.monotonic() <= self._session.expires_at:
            return False
        key = event.header.api_key
        if key == SASL_HANDSHAKE.key or (key == SASL_AUTHENTICATE.key and self._session.exchanging):
            return False
        log.info("closing Kafka connection from %s (user %s): its login expired without re-authentication",
                 self._peer, self._session.principal.user if self._session.principal else None)
        return True

    async def _log_in_by_certificate(self) -> bool:
        """Take the client certificate's principal, if any; False if the connection is to close."""
        ssl_object = self._writer.get_extra_info("ssl_object")
        login = await certificate_login(self._broker.users, ssl_object.getpeercert() if ssl_object else None,
                                        self._tls.principal_rules, self._peer)
        if login is None:
            return True   # anonymous: the ACLs decide (and refuse a principal-less client)
        self._session.principal = login.principal
        self._session.client.mechanism = CERTIFICATE_MECHANISM
        return await self._logged_in(stored=login.stored)

    async def _logged_in(self, *, stored: bool = True) -> bool:
        """The session has its principal: work in its namespace; False if that is full."""
        self._conn.authenticated = True
        self._meter = None   # the principal's namespace from now on
        principal = self._session.principal
        if self._registry is None:
            return True
        self._registry.logged_in(self._session.client, principal.user, principal.tenant, principal.namespace,
                                 stored=stored)
        if not await self._registry.enter(self._session.client, principal.tenant, principal.namespace):
            log.info("closing Kafka connection from %s: namespace %s/%s is at its max_connections",
                     self._peer, principal.tenant, principal.namespace)
            return False
        return True

    async def _respond(self, event: RequestReceived | UnsupportedApiVersions) -> Response:
        if isinstance(event, UnsupportedApiVersions):
            # As Kafka (KIP-511): only ApiVersions' own range, so the client retries at a version we know.
            own_range = [entry for entry in self._broker.api_versions if entry["api_key"] == API_VERSIONS.key]
            body = {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": own_range}
            return self._conn.response(API_VERSIONS, event.header, body, version=0)
        self._session.client.client_id = event.header.client_id
        try:
            ctx = RequestContext(self._broker, event.header, self._session)
            result = await self._handlers[event.api.key](event.body, ctx)
            if event.api.key in QUOTA_KEYS and (self._broker.quotas.active or self._namespace_limited()):
                return self._finish_throttled(event, result, self._namespace_throttle_ms(event.api.key))
            if inspect.isawaitable(result):
                return result   # the sender awaits it, in order
            return self._encode(event, result)
        except Exception as exc:
            raise HandlerFailed(event.header, event.api.name) from exc

    async def _finish(self, event: RequestReceived, result: Awaitable) -> bytes | None:
        try:
            body = await result
            return body if isinstance(body, bytes) else self._encode(event, body)   # bytes: encoded already
        except Exception as exc:
            raise HandlerFailed(event.header, event.api.name) from exc

    async def _finish_throttled(self, event: RequestReceived, result: Any, namespace_throttle: int) -> bytes | None:
        """Encode a Produce/Fetch response with the throttle time its bytes earned (KIP-219), or the
        namespace's rate limit, whichever is longer."""
        body = await result if inspect.isawaitable(result) else result
        quotas = self._broker.quotas.active
        if event.api.key == PRODUCE_KEY:
            throttle = await throttle_ms(self._broker, self._session, event.header, event.size) if quotas else 0
            throttle = max(throttle, namespace_throttle)
            encoded = self._encode(event, _with_throttle(body, throttle))
        else:
            encoded = self._encode(event, body)
            throttle = await throttle_ms(self._broker, self._session, event.header,
                                         len(encoded or b"")) if quotas else 0
            throttle = max(throttle, namespace_throttle)
            if throttle:
                encoded = self._encode(event, _with_throttle(body, throttle))
        if throttle:
            self._throttle_for(throttle)
        return encoded

    def _namespace_throttle_ms(self, api_key: int) -> int:
        """The namespace's wait, known as soon as the handler stored (or read) the batches: the next
        request is not read before it has passed, however many responses are still queued."""
        if self._registry is None:
            return 0
        throttle = namespace_throttle_ms(self._namespace_meter(), api_key)
        if throttle:
            self._throttle_for(throttle)
        return throttle

    def _throttle_for(self, throttle: int) -> None:
        loop = asyncio.get_running_loop()
        self._throttled_until = max(self._throttled_until, loop.time() + throttle / 1000)

    def _namespace_meter(self):
        """The meter of the namespace this connection's principal lands in (core/meters.py)."""
        if self._meter is None:
            principal = self._session.principal
            self._meter = self._broker.core.meters.of(*((principal.tenant, principal.namespace) if principal
                                                        else (DEFAULT_TENANT, DEFAULT_NAMESPACE)))
        return self._meter

    def _namespace_limited(self) -> bool:
        if self._registry is None:   # a broker without a core (tests)
            return False
        meter = self._namespace_meter()
        return meter.publish_limit is not None or meter.dispatch_limit is not None

    async def _wait_out_throttle(self) -> None:
        delay = self._throttled_until - asyncio.get_running_loop().time()
        if delay > 0:
            await asyncio.sleep(delay)
        self._throttled_until = 0.0

    def _encode(self, event: RequestReceived, body) -> bytes | None:
        return None if body is None else self._conn.response(event.api, event.header, body)

    def _wrote_at_once(self, response: Response) -> bool:
        """Write a ready response here when no earlier one is still to be written and the transport
        holds nothing back: the order is kept without waking the sender (a tailing Fetch, Metadata)."""
        if self._sender_holds or not self._pending.empty() or self._sender.done() \
                or not (response is None or isinstance(response, bytes)) \
                or self._writer.transport.get_write_buffer_size():
            return False
        if response is not None:
            self._writer.write(response)
        return True

    async def _enqueue(self, item: object) -> None:
        """Queue `item` for the sender, waiting while MAX_PENDING are queued: that is the read pause."""
        assert self._sender is not None
        if self._sender.done():
            _discard(item)
            raise _SendingStopped
        if not self._pending.full():
            self._pending.put_nowait(item)
            return
        put = asyncio.ensure_future(self._pending.put(item))
        try:
            await asyncio.wait((put, self._sender), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stored = put.done() and not put.cancelled()
            put.cancel()
        if not stored:
            _discard(item)
            raise _SendingStopped

    # --- sending ----------------------------------------------------------------------------------

    async def _finish_sending(self) -> None:
        """Let the sender write what is queued, then stop it."""
        try:
            await self._enqueue(_END)
        except _SendingStopped:
            return
        await self._sender

    async def _send_responses(self) -> None:
        try:
            while (item := await self._pending.get()) is not _END:
                self._sender_holds = True
                event, response = item
                if inspect.isawaitable(response):
                    response = await self._finish(event, response)
                if response is not None:      # acks=0 Produce: no response at all
                    self._writer.write(response)
                    await self._writer.drain()
                self._sender_holds = False
            return
        except ConnectionError:
            pass  # the peer is gone; the reader sees that too
        except Exception as exc:
            self._internal_error(exc)
        # Nothing more can be answered in order: drop the connection, which also wakes the reader.
        self._writer.transport.abort()

    def _discard_queued(self) -> None:
        while not self._pending.empty():
            _discard(self._pending.get_nowait())

    def _internal_error(self, exc: Exception) -> None:
        if self._failed:
            return   # e.g. a queued response failing too while the connection closes: said once already
        self._failed = True
        self._failures.internal_errors += 1
        if isinstance(exc, HandlerFailed):
            log.error("closing Kafka connection from %s (%s): %s: %r", self._peer,
                      _describe(exc.header, exc.api_name), exc, exc.__cause__, exc_info=exc.__cause__)
        else:
            log.error("closing Kafka connection from %s: internal error: %r", self._peer, exc, exc_info=exc)


def _describe(header: RequestHeader | None, api_name: str | None = None) -> str:
    if header is None:
        return "no request header"
    api = api_name or f"API key {header.api_key}"
    return f"client id {header.client_id!r}, {api} v{header.api_version}, correlation id {header.correlation_id}"


def _with_throttle(body: Any, throttle: int) -> Any:
    if throttle and isinstance(body, dict):
        body["throttle_time_ms"] = throttle
    return body


def _discard(item: object) -> None:
    # A deferred response never to be awaited: close or cancel it, so asyncio does not warn about it.
    response = item[1] if isinstance(item, tuple) else None
    if inspect.iscoroutine(response):
        response.close()
    elif isinstance(response, asyncio.Future):
        response.cancel()

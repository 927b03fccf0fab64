"""TLS for the client listeners: one server context built from the certificate settings, re-read on
demand, and a bounded handshake on each accepted connection.

Every TLS listener (Kafka SSL/SASL_SSL, amqps, and the front ends added later) takes the same
settings: a PEM certificate (chain) and its key, optionally the CA bundle client certificates must
chain to with the CA's revocation list, and whether a client certificate is not asked for,
requested, or required. Only TLS 1.2 and 1.3 are spoken.

`ServerTls.reload()` reads the files again (the revocation list too, so revoking needs no restart)
and swaps the context: connections accepted afterwards get the new certificate, open ones keep the
session they have. Files that do not load keep the old
context in place (a half-written certificate must not take the listeners down).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from asyncio import sslproto
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger("gateway.tls")

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
ConnectedCallback = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
REFUSALS_LOGGED_PER_MINUTE = 20   # refused handshakes beyond this in a minute are only counted


class TlsConfigError(ValueError):
    """The certificate, key or CA cannot be used; the message says which file and why."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    cert: str                      # PEM certificate, the server's first, then its chain
    key: str                       # PEM private key of `cert`
    ca: str | None = None          # PEM CA bundle client certificates are checked against
    client_auth: str = "none"      # none | requested | required
    handshake_timeout_s: float = 10.0
    crl: str | None = None         # PEM revocation list(s) of the CA: revoked client certificates are refused


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A server context for `settings`; TlsConfigError if a file is missing or does not load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(settings.cert, settings.key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot load certificate {settings.cert} with key {settings.key}: {exc}") from None
    if settings.ca is not None:
        try:
            context.load_verify_locations(cafile=settings.ca)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"cannot load CA bundle {settings.ca}: {exc}") from None
    if settings.crl is not None:
        try:
            context.load_verify_locations(cafile=settings.crl)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"cannot load certificate revocation list {settings.crl}: {exc}") from None
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    context.verify_mode = CLIENT_AUTH[settings.client_auth]
    return context


class ServerTls:
    """The current server context of the TLS listeners, and the counts of refused handshakes."""

    def __init__(self, settings: TlsSettings) -> None:
        self.settings = settings
        self.context = server_context(settings)
        self.refused: dict[str, int] = {}   # handshakes refused, by listener
        self._window_start = 0.0
        self._logged_in_window = 0

    def reload(self) -> bool:
        """Read the files again; True if the new context is in use, False if the old one stays."""
        try:
            self.context = server_context(self.settings)
        except TlsConfigError as exc:
            log.error("TLS certificates not reloaded, the previous ones stay in use: %s", exc)
            return False
        log.info("TLS certificates reloaded from %s", self.settings.cert)
        return True

    def protocol_factory(self, listener: str, connected: ConnectedCallback) -> Callable[[], asyncio.Protocol]:
        """What a TLS listener's server makes of each accepted connection: a TLS layer over a stream,
        `connected` called with that stream once the handshake is through."""
        def accept() -> asyncio.Protocol:
            return _Accepted(self, listener, connected)
        return accept

    def _handshake_done(self, listener: str, peer: object, outcome: asyncio.Future) -> None:
        exc = outcome.exception() if not outcome.cancelled() else None
        if exc is not None:
            self._refused(listener, peer, _reason(exc))

    def _refused(self, listener: str, peer: object, reason: str) -> None:
        self.refused[listener] = self.refused.get(listener, 0) + 1
        now = time.monotonic()
        if now - self._window_start >= 60:
            if self._logged_in_window > REFUSALS_LOGGED_PER_MINUTE:
                log.warning("%d more TLS handshakes refused in the last minute",
                            self._logged_in_window - REFUSALS_LOGGED_PER_MINUTE)
            self._window_start, self._logged_in_window = now, 0
        self._logged_in_window += 1
        if self._logged_in_window <= REFUSALS_LOGGED_PER_MINUTE:
            log.warning("%s: TLS handshake with %s refused: %s", listener,
                        _address(peer), reason)


class _Accepted(asyncio.Protocol):
    """An accepted connection, for no longer than it takes to hand it to a TLS layer.

    The swap happens as the connection is made, before anything is read: bytes read into a plain
    stream first (uvloop starts reading right after connection_made, whatever the protocol asks)
    would never reach the TLS layer and its handshake would stall. This is what the event loop does
    itself for a server made with `ssl=`, done here to learn of the handshakes that fail.
    """

    def __init__(self, tls: ServerTls, listener: str, connected: ConnectedCallback) -> None:
        self._tls, self._listener, self._connected = tls, listener, connected

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        loop = asyncio.get_running_loop()
        stream = asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), self._connected, loop=loop)
        handshake = loop.create_future()
        layer = _tls_protocol_class(loop)(loop, stream, self._tls.context, handshake, server_side=True,
                                          ssl_handshake_timeout=self._tls.settings.handshake_timeout_s)
        transport.set_protocol(layer)
        layer.connection_made(transport)
        handshake.add_done_callback(functools.partial(self._tls._handshake_done, self._listener,
                                                       transport.get_extra_info("peername")))


def _tls_protocol_class(loop: asyncio.AbstractEventLoop) -> type:
    """The event loop's own TLS protocol (uvloop has its own, asyncio's would not run on its transports)."""
    try:
        import uvloop
    except ImportError:
        return sslproto.SSLProtocol
    return uvloop.loop.SSLProtocol if isinstance(loop, uvloop.Loop) else sslproto.SSLProtocol


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL"):
        return f"{exc.reason} (not a TLS client?)"
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"client certificate refused: {exc.verify_message}"   # expired, unknown CA, ...
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return str(exc) or type(exc).__name__


def _address(peer: object) -> str:
    if isinstance(peer, tuple):
        host, port = peer[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(peer)

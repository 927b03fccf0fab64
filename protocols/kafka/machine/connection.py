"""One Kafka client connection's protocol rules, without I/O (h11 style).

`receive_data(bytes)` returns the requests completed by those bytes, in order; `receive_data(b"")`
means EOF. It owns: the frame size limit, checked before buffering a frame (a smaller one until
the client authenticated, when SASL is on); header parsing; the rule that an unknown API key, an
unknown version of anything but ApiVersions, or an unparsable body closes the connection; and the
KIP-511 fallback, where an ApiVersions request at a version we do not know is answered in the v0
format with UNSUPPORTED_VERSION and the range of ApiVersions we serve (the adapter writes it).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from protocols.kafka.codec.compile import Msg, decode_request, encode_response
from protocols.kafka.codec.declare import Api
from protocols.kafka.codec.errors import DecodeError
from protocols.kafka.codec.frames import API_VERSIONS_KEY, RequestHeader, peek_header, response_frame, skip_tagged_fields

_SIZE = struct.Struct(">i")
SASL_KEYS = frozenset({17, 36})  # SaslHandshake, SaslAuthenticate


class RemoteProtocolError(Exception):
    """The peer broke the protocol; the connection is closed after one log line.

    `header` is the offending request's header when it could be read (for that log line).
    """

    def __init__(self, message: str, header: RequestHeader | None = None) -> None:
        super().__init__(message)
        self.header = header


@dataclass(slots=True)
class RequestReceived:
    api: Api
    header: RequestHeader
    body: Msg
    size: int = 0      # the frame's size in bytes (what quotas count)


@dataclass(slots=True)
class UnsupportedApiVersions:
    """ApiVersions at a version we do not know: answer with v0 and UNSUPPORTED_VERSION."""

    header: RequestHeader


@dataclass(frozen=True, slots=True)
class Limits:
    max_frame_bytes: int = 100 * 1024 * 1024
    max_frame_bytes_before_auth: int = 512 * 1024


class KafkaServerConnection:
    def __init__(self, apis: Mapping[int, Api], limits: Limits, *, requires_auth: bool = False) -> None:
        self._apis = apis
        self._limits = limits
        self._buffer = bytearray()
        self.authenticated = not requires_auth
        self.closed = False

    def receive_data(self, data: bytes) -> list[RequestReceived | UnsupportedApiVersions]:
        """The requests completed by `data`; raises RemoteProtocolError (and stays closed) on a violation."""
        if self.closed:
            raise RemoteProtocolError("data after close")
        try:
            return self._receive(data)
        except RemoteProtocolError:
            self.closed = True
            self._buffer.clear()
            raise

    def _receive(self, data: bytes) -> list[RequestReceived | UnsupportedApiVersions]:
        if not data:
            self.closed = True
            if self._buffer:
                raise RemoteProtocolError(f"connection closed inside a frame ({len(self._buffer)} bytes)")
            return []
        self._buffer += data
        events = []
        while len(self._buffer) >= 4:
            size = _SIZE.unpack_from(self._buffer)[0]
            limit = self._limits.max_frame_bytes if self.authenticated else self._limits.max_frame_bytes_before_auth
            if size < 0 or size > limit:
                # A TLS record header read as a size (KIP-498): say so, it is a client misconfigured
                tls = self._buffer[:2] == b"\x16\x03"
                hint = " (a TLS handshake: a TLS client on the plaintext port?)" if tls else ""
                raise RemoteProtocolError(f"frame size {size} outside 0..{limit}{hint}")
            if len(self._buffer) < 4 + size:
                break
            with memoryview(self._buffer) as view:   # one copy of the frame, not a slice then a copy
                frame = bytes(view[4:4 + size])
            del self._buffer[:4 + size]
            events.append(self._parse(frame, size))
        return events

    def _parse(self, frame: bytes, size: int) -> RequestReceived | UnsupportedApiVersions:
        try:
            header, reader = peek_header(frame)
        except DecodeError as exc:
            raise RemoteProtocolError(f"bad request header: {exc}") from None
        api = self._apis.get(header.api_key)
        if api is None:
            raise RemoteProtocolError(f"unknown API key {header.api_key}", header)
        low, high = api.versions
        if not low <= header.api_version <= high:
            if header.api_key == API_VERSIONS_KEY:
                return UnsupportedApiVersions(header)
            raise RemoteProtocolError(f"{api.name} v{header.api_version} is not supported ({low}-{high})", header)
        if not self.authenticated and header.api_key not in SASL_KEYS and header.api_key != API_VERSIONS_KEY:
            raise RemoteProtocolError(f"{api.name} before authentication", header)
        try:
            if api.is_flexible(header.api_version):
                skip_tagged_fields(reader)
            body = decode_request(api, header.api_version, reader.buf[reader.pos:])
        except DecodeError as exc:
            raise RemoteProtocolError(f"{api.name} v{header.api_version}: {exc}", header) from None
        return RequestReceived(api, header, body, size)

    @staticmethod
    def response(api: Api, header: RequestHeader, body: Mapping[str, Any], version: int | None = None) -> bytes:
        """The framed response to `header`, written at its version (or `version`, for the fallback)."""
        version = header.api_version if version is None else version
        out = bytearray()
        encode_response(api, version, body, out)
        flexible_header = api.is_flexible(version) and api.key != API_VERSIONS_KEY
        return response_frame(header.correlation_id, out, flexible_header=flexible_header)

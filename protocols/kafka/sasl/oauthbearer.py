"""The client's message of SASL OAUTHBEARER (RFC 7628 section 3.1), as Kafka's clients send it (KIP-255):

    gs2-header %x01 *(key "=" value %x01) %x01        e.g.  "n,,\\x01auth=Bearer eyJ...\\x01\\x01"

The gs2-header is "n,," or "n,a=<authzid>,"; channel binding is not supported ("y" is taken as
"n", as Kafka does; "p=" is refused). The "auth" pair carries "Bearer <token>"; the other pairs are
SASL extensions (KIP-342), parsed and ignored.

A token the server refuses is answered, as the RFC (section 3.2.2) and Kafka do, with a JSON error
as the server's challenge; the client acknowledges with a lone %x01, and only then does the exchange
fail (SASL_AUTHENTICATION_FAILED).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SEPARATOR = "\x01"
INVALID_TOKEN = b'{"status":"invalid_token"}'
MAX_MESSAGE_BYTES = 64 * 1024

_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7e \t\r\n]+")
_BEARER = re.compile(r"(?i:bearer) +([-._~+/A-Za-z0-9]+=*)")


class OAuthBearerError(Exception):
    """The client's message is malformed; the message says how."""


@dataclass(frozen=True, slots=True)
class InitialResponse:
    token: str
    authzid: str | None = None
    extensions: dict[str, str] = field(default_factory=dict)


def parse_initial_response(data: bytes) -> InitialResponse:
    if len(data) > MAX_MESSAGE_BYTES:
        raise OAuthBearerError("the message is too long")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise OAuthBearerError("the message is not UTF-8") from None
    header, sep, rest = text.partition(SEPARATOR)
    if not sep or not rest.endswith(SEPARATOR):
        raise OAuthBearerError("the message is not gs2-header %x01 pairs %x01")
    authzid = _gs2_authzid(header)
    pairs: dict[str, str] = {}
    body = rest[:-1]
    if not body.endswith(SEPARATOR):
        raise OAuthBearerError('no "auth" pair')
    for pair in body[:-1].split(SEPARATOR):
        key, eq, value = pair.partition("=")
        if not eq or not _KEY.fullmatch(key) or not _VALUE.fullmatch(value) or key in pairs:
            raise OAuthBearerError("a malformed or repeated key=value pair")
        pairs[key] = value
    auth = pairs.pop("auth", None)
    match = _BEARER.fullmatch(auth) if auth is not None else None
    if match is None:
        raise OAuthBearerError('no "auth=Bearer <token>" pair')
    return InitialResponse(match.group(1), authzid, pairs)


def _gs2_authzid(header: str) -> str | None:
    parts = header.split(",")
    if len(parts) != 3 or parts[2] != "" or parts[0] not in ("n", "y"):
        raise OAuthBearerError("channel binding is not supported, or the gs2-header is malformed")
    if not parts[1]:
        return None
    if not parts[1].startswith("a=") or len(parts[1]) == 2:
        raise OAuthBearerError("a malformed authorization id")
    name = parts[1][2:]
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise OAuthBearerError("a malformed authorization id")
    return name.replace("=2C", ",").replace("=3D", "=")

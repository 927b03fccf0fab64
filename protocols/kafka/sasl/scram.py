"""The server side of a SCRAM exchange (RFC 5802, SHA-256/512 as RFC 7677), as a small state machine.

    client-first  "n,,n=<user>,r=<client nonce>"       -> server-first "r=<nonce>,s=<salt>,i=<iterations>"
    client-final  "c=biws,r=<nonce>,p=<proof>"          -> server-final "v=<server signature>"

The caller looks the user's credential up between the two steps (`username` after `receive_first`).
Channel binding is not supported (a "p=" GS2 header is refused), as in Kafka.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

from core.auth import ScramCredential


class ScramError(Exception):
    """The exchange failed; the message says why (never which part of a credential was wrong)."""


def _attributes(message: str) -> dict[str, str]:
    parts = {}
    for item in message.split(","):
        key, sep, value = item.partition("=")
        if not sep or len(key) != 1:
            raise ScramError(f"malformed SCRAM attribute {item!r}")
        parts.setdefault(key, value)
    return parts


def _unescape_name(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed user name")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    def __init__(self, hash_name: str, nonce: bytes | None = None) -> None:
        self._hash = hash_name
        self._server_nonce = base64.b64encode(nonce or os.urandom(24)).decode().rstrip("=")
        self.username: str | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None

    def receive_first(self, data: bytes) -> str:
        """Parse client-first; returns the user name to look up."""
        try:
            message = data.decode()
        except UnicodeDecodeError:
            raise ScramError("client-first is not UTF-8") from None
        cbind, _, rest = message.partition(",")
        authzid, _, bare = rest.partition(",")
        if cbind not in ("n", "y"):
            raise ScramError("channel binding is not supported")
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise ScramError("client-first lacks a user name or nonce")
        self.username = _unescape_name(attrs["n"])
        if authzid and _unescape_name(authzid.removeprefix("a=")) != self.username:
            raise ScramError("authorization id differs from the user name")
        self._gs2_header = f"{cbind},{authzid},"
        self._client_first_bare = bare
        self._nonce = attrs["r"] + self._server_nonce
        return self.username

    def server_first(self, credential: ScramCredential) -> bytes:
        self._credential = credential
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def receive_final(self, data: bytes) -> bytes:
        """Verify the client's proof; returns server-final. Raises ScramError on any mismatch."""
        if self._credential is None:
            raise ScramError("client-final before server-first")
        try:
            message = data.decode()
        except UnicodeDecodeError:
            raise ScramError("client-final is not UTF-8") from None
        without_proof, sep, proof_part = message.rpartition(",p=")
        if not sep:
            raise ScramError("client-final lacks a proof")
        attrs = _attributes(without_proof)
        expected_binding = base64.b64encode(self._gs2_header.encode()).decode()
        if attrs.get("c") != expected_binding:
            raise ScramError("channel binding data differs")
        if attrs.get("r") != self._nonce:
            raise ScramError("nonce differs")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise ScramError("proof is not base64") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(self._credential.stored_key, auth_message, self._hash)
        if len(proof) != len(signature):
            raise ScramError("invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), self._credential.stored_key):
            raise ScramError("invalid credentials")
        verifier = hmac.digest(self._credential.server_key, auth_message, self._hash)
        return b"v=" + base64.b64encode(verifier)

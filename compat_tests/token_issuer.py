"""A token issuer for tests: its own signing keys, JWTs minted with PyJWT, and its key set (JWKS)
served over a local HTTP server or written to a file, as an identity provider would publish it."""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

ISSUER = "https://issuer.test"
AUDIENCE = "gateway"


class SigningKey:
    def __init__(self, kind: str = "RSA") -> None:
        self.kid = f"{kind.lower()}-{uuid.uuid4().hex[:8]}"
        if kind == "RSA":
            self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.algorithm = "RS256"
            public = RSAAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        else:
            self.private = ec.generate_private_key(ec.SECP256R1())
            self.algorithm = "ES256"
            public = ECAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        self.jwk = {**public, "kid": self.kid, "use": "sig", "alg": self.algorithm}


class TokenIssuer:
    """Publishes the public half of `keys`; `mint` signs with the first unless told another."""

    def __init__(self, *kinds: str) -> None:
        self.keys = [SigningKey(kind) for kind in (kinds or ("RSA",))]
        self.requests = 0            # how often the key set was fetched over HTTP
        self._server: http.server.ThreadingHTTPServer | None = None

    def mint(self, subject: str = "alice", *, lifetime_s: float = 300, key: SigningKey | None = None,
             issuer: str = ISSUER, audience: str = AUDIENCE, **claims: Any) -> str:
        key = key or self.keys[0]
        now = int(time.time())
        payload = {"sub": subject, "iss": issuer, "aud": audience, "iat": now, "exp": int(now + lifetime_s),
                   **claims}
        return jwt.encode(payload, key.private, algorithm=key.algorithm, headers={"kid": key.kid})

    def jwks(self) -> dict:
        return {"keys": [key.jwk for key in self.keys]}

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.jwks()))
        return path

    def serve(self) -> str:
        """Start serving the key set over HTTP on a free local port; returns its URL."""
        issuer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:   # noqa: N802 (http.server's name)
                issuer.requests += 1
                body = json.dumps(issuer.jwks()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return "http://127.0.0.1:%d/jwks.json" % self._server.server_address[1]

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

"""Users and their credentials: who may connect, and which tenant/namespace they land in.

Users live at /users/<name> in the metadata store:

    {"tenant": str, "namespace": str,
     "scram": {"SCRAM-SHA-256": {"salt": b64, "iterations": int, "stored_key": b64, "server_key": b64},
               "SCRAM-SHA-512": {...}}}

Only salted SCRAM keys are stored (RFC 5802), never the password; PLAIN logins are checked by
deriving the SCRAM-SHA-256 keys from the offered password and comparing in constant time, so one
stored credential serves PLAIN, AMQPLAIN and both SCRAM mechanisms.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
from dataclasses import dataclass

from core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT, check_name
from storage.api import MetadataStore, NoNode

SCRAM_MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
DEFAULT_ITERATIONS = 4096


@dataclass(frozen=True, slots=True)
class Principal:
    user: str
    tenant: str = DEFAULT_TENANT
    namespace: str = DEFAULT_NAMESPACE


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def derive(cls, password: str, hash_name: str, salt: bytes, iterations: int) -> "ScramCredential":
        salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", hash_name)
        return cls(salt, iterations, hashlib.new(hash_name, client_key).digest(),
                   hmac.digest(salted, b"Server Key", hash_name))

    def to_doc(self) -> dict:
        enc = lambda raw: base64.b64encode(raw).decode()  # noqa: E731
        return {"salt": enc(self.salt), "iterations": self.iterations, "stored_key": enc(self.stored_key),
                "server_key": enc(self.server_key)}

    @classmethod
    def from_doc(cls, doc: dict) -> "ScramCredential":
        dec = base64.b64decode
        return cls(dec(doc["salt"]), doc["iterations"], dec(doc["stored_key"]), dec(doc["server_key"]))


@dataclass(frozen=True, slots=True)
class User:
    principal: Principal
    scram: dict[str, ScramCredential]


class UserStore:
    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata

    async def put_user(self, name: str, password: str, *, tenant: str = DEFAULT_TENANT,
                       namespace: str = DEFAULT_NAMESPACE, iterations: int = DEFAULT_ITERATIONS) -> None:
        check_name("user", name)
        scram = {}
        for mechanism, hash_name in SCRAM_MECHANISMS.items():
            credential = await asyncio.to_thread(ScramCredential.derive, password, hash_name, os.urandom(16), iterations)
            scram[mechanism] = credential.to_doc()
        doc = {"tenant": tenant, "namespace": namespace, "scram": scram}
        await self._metadata.put(f"/users/{name}", json.dumps(doc).encode())

    async def delete_user(self, name: str) -> None:
        try:
            await self._metadata.delete(f"/users/{name}")
        except NoNode:
            pass

    async def get(self, name: str) -> User | None:
        try:
            check_name("user", name)
        except Exception:
            return None
        node = await self._metadata.get(f"/users/{name}")
        if node is None:
            return None
        doc = json.loads(node.value)
        scram = {mechanism: ScramCredential.from_doc(c) for mechanism, c in doc["scram"].items()}
        return User(Principal(name, doc["tenant"], doc["namespace"]), scram)

    async def verify_password(self, name: str, password: str) -> Principal | None:
        """PLAIN-style check: the principal if the password is right, else None (constant time)."""
        user = await self.get(name)
        reference = user.scram["SCRAM-SHA-256"] if user else _DUMMY
        offered = await asyncio.to_thread(ScramCredential.derive, password, "sha256", reference.salt,
                                          reference.iterations)
        matches = hmac.compare_digest(offered.stored_key, reference.stored_key)
        return user.principal if user is not None and matches else None


# Compared against when the user does not exist, so a wrong user costs as much as a wrong password.
_DUMMY = ScramCredential(b"\0" * 16, DEFAULT_ITERATIONS, b"\0" * 32, b"\0" * 32)

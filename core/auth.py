"""Users and their credentials: who may connect, which tenant/namespace they land in, and what
they may do in which tenant/namespace.

Users live at /users/<name> in the metadata store:

    {"tenant": str, "namespace": str,
     "scram": {"SCRAM-SHA-256": {"salt": b64, "iterations": int, "stored_key": b64, "server_key": b64},
               "SCRAM-SHA-512": {...}},
     "permissions": [{"tenant": str, "namespace": str, "configure": regex, "write": regex, "read": regex}, ...],
     "tags": [str, ...],
     "roles": [str, ...]}

"permissions" (optional) are RabbitMQ's per-vhost permissions: in each listed tenant/namespace, the
queues and exchanges whose names the configure / write / read patterns match (a regular-expression
search; "" is "^$" and grants nothing). A namespace "*" stands for every namespace of the tenant
that has no permission of its own (core/access.py). Without the key a user has every permission in its own
tenant/namespace and none elsewhere; with it, exactly the listed ones.

"tags" (optional) are RabbitMQ's user tags; `administrator` opens the admin API (gateway/admin).

"roles" (optional) name roles whose permissions the user has too: /roles/<role> holds
{"permissions": [...]} in the same form (core/access.py adds them to the user's own).

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.errors import StorageUnavailable
from core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT, check_name
from storage.api import BadVersion, MetadataStore, NoNode, StorageError

SCRAM_MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
DEFAULT_ITERATIONS = 4096
EVERYTHING = ".*"
ANY_NAMESPACE = "*"    # a permission's namespace that stands for every namespace of its tenant


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
        return cls.from_salted_password(salted, hash_name, salt, iterations)

    @classmethod
    def from_salted_password(cls, salted: bytes, hash_name: str, salt: bytes, iterations: int) -> "ScramCredential":
        """The stored keys of a password already salted (what Kafka's admin clients send)."""
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
class Permission:
    """What a user may do in one tenant/namespace: regular expressions over queue and exchange names
    for configure (declare, delete), write (publish to, bind into) and read (consume, bind from)."""

    tenant: str
    namespace: str
    configure: str = EVERYTHING
    write: str = EVERYTHING
    read: str = EVERYTHING

    def to_doc(self) -> dict:
        return {"tenant": self.tenant, "namespace": self.namespace, "configure": self.configure,
                "write": self.write, "read": self.read}

    @classmethod
    def from_doc(cls, doc: dict) -> "Permission":
        return cls(doc["tenant"], doc["namespace"], doc["configure"], doc["write"], doc["read"])


@dataclass(frozen=True, slots=True)
class User:
    principal: Principal
    scram: dict[str, ScramCredential]
    permissions: tuple[Permission, ...] | None = None   # None: everything in its own tenant/namespace
    tags: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()

    def permission_on(self, tenant: str, namespace: str) -> Permission | None:
        """The user's permission in a tenant/namespace, or None if it has none there."""
        if self.permissions is None:
            own = self.principal
            return Permission(tenant, namespace) if (own.tenant, own.namespace) == (tenant, namespace) else None
        for permission in self.permissions:
            if (permission.tenant, permission.namespace) == (tenant, namespace):
                return permission
        return None


class UserStore:
    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata

    async def put_user(self, name: str, password: str, *, tenant: str = DEFAULT_TENANT,
                       namespace: str = DEFAULT_NAMESPACE, iterations: int = DEFAULT_ITERATIONS,
                       permissions: Sequence[Permission] | None = None, tags: Sequence[str] = (),
                       roles: Sequence[str] = ()) -> None:
        check_name("user", name)
        scram = {}
        for mechanism, hash_name in SCRAM_MECHANISMS.items():
            credential = await asyncio.to_thread(ScramCredential.derive, password, hash_name, os.urandom(16), iterations)
            scram[mechanism] = credential.to_doc()
        doc = {"tenant": tenant, "namespace": namespace, "scram": scram}
        if permissions is not None:
            doc["permissions"] = [permission.to_doc() for permission in permissions]
        if tags:
            doc["tags"] = list(tags)
        if roles:
            doc["roles"] = list(roles)
        await self._metadata.put(f"/users/{name}", json.dumps(doc).encode())

    async def delete_user(self, name: str) -> None:
        try:
            await self._metadata.delete(f"/users/{name}")
        except NoNode:
            pass

    async def get(self, name: str) -> User | None:
        """The user, None if there is none; StorageUnavailable when the store cannot say (a
        cluster's ZooKeeper gone): not knowing is not a refusal, the client may come back."""
        try:
            check_name("user", name)
        except Exception:
            return None
        try:
            node = await self._metadata.get(f"/users/{name}")
        except StorageError as exc:
            raise StorageUnavailable(f"the users cannot be read now: {exc}") from exc
        if node is None:
            return None
        doc = json.loads(node.value)
        scram = {mechanism: ScramCredential.from_doc(c) for mechanism, c in doc["scram"].items()}
        permissions = doc.get("permissions")
        if permissions is not None:
            permissions = tuple(Permission.from_doc(p) for p in permissions)
        return User(Principal(name, doc["tenant"], doc["namespace"]), scram, permissions, tuple(doc.get("tags", ())),
                    tuple(doc.get("roles", ())))

    async def verify(self, name: str, password: str) -> User | None:
        """PLAIN-style check: the user if the password is right, else None (constant time)."""
        user = await self.get(name)
        mechanism = next((m for m in SCRAM_MECHANISMS if user is not None and m in user.scram), None)
        reference = user.scram[mechanism] if mechanism is not None else _DUMMY
        offered = await asyncio.to_thread(ScramCredential.derive, password, SCRAM_MECHANISMS.get(mechanism, "sha256"),
                                          reference.salt, reference.iterations)
        matches = hmac.compare_digest(offered.stored_key, reference.stored_key)
        return user if mechanism is not None and matches else None

    async def verify_password(self, name: str, password: str) -> Principal | None:
        """As verify, for who the user is."""
        user = await self.verify(name, password)
        return user.principal if user is not None else None


    async def names(self) -> list[str]:
        return sorted(await self._metadata.children("/users"))

    async def put_scram(self, name: str, mechanism: str, credential: ScramCredential, *,
                        tenant: str = DEFAULT_TENANT, namespace: str = DEFAULT_NAMESPACE) -> None:
        """Set one mechanism's credential; a new user lands in `tenant`/`namespace`."""
        check_name("user", name)
        doc = await self._doc(name) or {"tenant": tenant, "namespace": namespace, "scram": {}}
        doc["scram"][mechanism] = credential.to_doc()
        await self._metadata.put(f"/users/{name}", json.dumps(doc).encode())

    async def delete_scram(self, name: str, mechanism: str) -> bool:
        """Remove one mechanism's credential (the user with its last one); False if it had none."""
        doc = await self._doc(name)
        if doc is None or mechanism not in doc["scram"]:
            return False
        del doc["scram"][mechanism]
        if doc["scram"]:
            await self._metadata.put(f"/users/{name}", json.dumps(doc).encode())
        else:
            await self.delete_user(name)
        return True

    async def update(self, name: str, change: Callable[[dict], None]) -> bool:
        """Apply `change` to the user's stored document (compare-and-set, retried); False if no such user."""
        for _ in range(10):
            node = await self._metadata.get(f"/users/{name}")
            if node is None:
                return False
            doc = json.loads(node.value)
            change(doc)
            try:
                await self._metadata.put(f"/users/{name}", json.dumps(doc).encode(), node.version)
            except NoNode:
                return False
            except BadVersion:
                continue
            return True
        raise BadVersion(f"user {name} keeps changing")

    async def _doc(self, name: str) -> dict | None:
        node = await self._metadata.get(f"/users/{name}")
        return None if node is None else json.loads(node.value)


# Compared against when the user does not exist, so a wrong user costs as much as a wrong password.
_DUMMY = ScramCredential(b"\0" * 16, DEFAULT_ITERATIONS, b"\0" * 32, b"\0" * 32)

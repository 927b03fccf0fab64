"""Who is calling the admin API, and what they may see.

HTTP Basic against the gateway's own user store (the logins Kafka SASL and AMQP use). A user tagged
`administrator` (RabbitMQ's tag) may do everything; one tagged `tenant-admin` administers its own
tenant only, and is told "not found" about every other, so it never learns another tenant's names.
Everyone else is refused. A verified password is remembered for a short while (by its hash), so a
console polling every second does not pay a key derivation per call. A wrong password is written to
the audit log (core/audit.py); the caller is kept on the request (`request.state.caller`), so the
change the request makes is audited under its name (gateway/admin/audit.py).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from fastapi import HTTPException, Request, status
from fastapi.security import HTTPBasic, HTTPBasicCredentials

from core.audit import AuditLog
from core.auth import User, UserStore
from core.names import check_name

ADMINISTRATOR = "administrator"
TENANT_ADMIN = "tenant-admin"
_REMEMBER_S = 10.0
_REMEMBERED_MAX = 1024
_CHALLENGE = {"WWW-Authenticate": 'Basic realm="gateway"'}

basic = HTTPBasic(realm="gateway", auto_error=False)


@dataclass(frozen=True, slots=True)
class Caller:
    user: str
    tenant_scope: str | None   # None: every tenant (an administrator)

    def sees(self, tenant: str) -> bool:
        return self.tenant_scope is None or self.tenant_scope == tenant

    def check_tenant(self, tenant: str) -> None:
        if not self.sees(tenant):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"tenant {tenant} does not exist")

    def check_administrator(self) -> None:
        if self.tenant_scope is not None:
            raise HTTPException(status.HTTP_403_FORBIDDEN, "only an administrator may do this")


def client_address(request: Request) -> str | None:
    client = request.client
    return None if client is None else f"{client.host}:{client.port}"


async def visible_tenant(tenancy, caller: Caller, tenant: str) -> None:
    """404 unless the tenant exists and the caller may see it (the same answer either way)."""
    check_name("tenant", tenant)
    caller.check_tenant(tenant)
    if not await tenancy.tenant_exists(tenant):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"tenant {tenant} does not exist")


async def visible_namespace(tenancy, caller: Caller, tenant: str, namespace: str) -> None:
    await visible_tenant(tenancy, caller, tenant)
    if not await tenancy.namespace_exists(tenant, namespace):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"namespace {tenant}/{namespace} does not exist")


class Authenticator:
    def __init__(self, users: UserStore, audit: AuditLog | None = None) -> None:
        self._users = users
        self._audit = audit
        self._remembered: dict[tuple[str, bytes], tuple[float, User]] = {}

    async def __call__(self, request: Request) -> Caller:
        # The console asks without the challenge, which would make a browser pop up its own login dialog.
        challenge = {} if request.headers.get("x-requested-with") == "XMLHttpRequest" else _CHALLENGE
        credentials: HTTPBasicCredentials | None = await basic(request)
        if credentials is None:
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "authentication required", headers=challenge)
        user = await self._verify(credentials.username, credentials.password)
        if user is None:
            if self._audit is not None:
                self._audit.refused("login", "admin", credentials.username, "login", "bad credentials",
                                    client_address(request))
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "wrong user name or password", headers=challenge)
        if ADMINISTRATOR in user.tags:
            caller = Caller(user.principal.user, None)
        elif TENANT_ADMIN in user.tags:
            caller = Caller(user.principal.user, user.principal.tenant)
        else:
            request.state.refused_user = user.principal.user
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"user {user.principal.user} is not tagged {ADMINISTRATOR}")
        request.state.caller = caller
        return caller

    async def _verify(self, name: str, password: str) -> User | None:
        key = (name, hashlib.sha256(password.encode()).digest())
        now = time.monotonic()
        remembered = self._remembered.get(key)
        if remembered is not None and remembered[0] > now:
            # Tags may have changed meanwhile: re-read the user (cheap), not the password.
            user = await self._users.get(name)
            if user is not None and user.scram == remembered[1].scram:
                return user
        user = await self._users.verify(name, password)
        if user is not None:
            if len(self._remembered) >= _REMEMBERED_MAX:
                self._remembered.clear()
            self._remembered[key] = (now + _REMEMBER_S, user)
        return user

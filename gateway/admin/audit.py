"""Every change made through the admin API, in the audit log (core/audit.py).

A request that may change something (POST, PUT, PATCH, DELETE under /api/v1) is written once it is
answered: who (the authenticated caller), from where, the method and path, and the status. A route
that knows what it changed says so on the request (`record`): the target and its state before and
after. A request refused with 403 is a refused authorization; 401s are written by the
Authenticator (gateway/admin/security.py).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request

from core.audit import AuditLog
from gateway.admin.security import client_address

_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def record(request: Request, target: str, before: Any, after: Any) -> None:
    """What the request changed, for its audit line."""
    request.state.audited = (target, before, after)


def install(app: FastAPI, audit: AuditLog, prefix: str) -> None:
    @app.middleware("http")
    async def audit_changes(request: Request, call_next):
        response = await call_next(request)
        if request.method not in _CHANGING or not request.url.path.startswith(prefix) or not audit.enabled:
            return response
        caller = getattr(request.state, "caller", None)
        source = client_address(request)
        action = f"{request.method} {request.url.path}"
        if response.status_code == 403:
            user = caller.user if caller is not None else getattr(request.state, "refused_user", None)
            audit.refused("authorization", "admin", user, action, "forbidden", source)
        elif caller is not None:
            target, before, after = getattr(request.state, "audited", (request.url.path, None, None))
            audit.change(who=caller.user, source=source, action=action, target=target, before=before, after=after,
                         status=response.status_code)
        return response

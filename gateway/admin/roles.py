"""Roles: named sets of permissions users take on (core/roles.py). Administrators only: a role spans tenants.

    GET    /roles                   name and permissions of each
    PUT    /roles/{name}            {"permissions": [{"tenant", "namespace", "configure", "write", "read"}]}
    DELETE /roles/{name}

A user gets roles with PUT /users/{name} {"roles": [...]}. A change of a role applies to the open
connections of its users at once, as a change of their own permissions does; each is audited.
"""

# No `from __future__ import annotations` here: FastAPI must see the routes' annotations as
# objects (they name dependencies local to router()).

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, status
from pydantic import BaseModel

from core.names import check_name
from core.roles import RoleStore
from gateway.admin.audit import record
from gateway.admin.security import Caller
from gateway.admin.users import checked_permission


class RoleBody(BaseModel):
    permissions: list[dict[str, str]]

    model_config = {"extra": "forbid"}


def router(context, authenticate) -> APIRouter:
    api = APIRouter(tags=["roles"])
    roles = RoleStore(context.core.metadata)
    tenancy = context.tenancy
    Authenticated = Annotated[Caller, Depends(authenticate)]

    def role_doc(name: str, permissions) -> dict[str, Any]:
        return {"name": name, "permissions": [p.to_doc() for p in permissions]}

    @api.get("/roles")
    async def list_roles(caller: Authenticated) -> list[dict[str, Any]]:
        caller.check_administrator()
        found = []
        for name in await roles.names():
            permissions = await roles.get(name)
            if permissions is not None:
                found.append(role_doc(name, permissions))
        return found

    @api.put("/roles/{name}")
    async def put_role(name: str, body: RoleBody, caller: Authenticated, request: Request) -> dict[str, Any]:
        caller.check_administrator()
        check_name("role", name)
        permissions = [checked_permission(doc) for doc in body.permissions]
        for permission in permissions:
            if not await tenancy.tenant_exists(permission.tenant):
                raise HTTPException(status.HTTP_400_BAD_REQUEST, f"tenant {permission.tenant} does not exist")
        before = await roles.get(name)
        await roles.put(name, permissions)
        await context.core.access.refresh_role(name)
        after = role_doc(name, permissions)
        record(request, f"role {name}", before and role_doc(name, before), after)
        return after

    @api.delete("/roles/{name}", status_code=status.HTTP_204_NO_CONTENT)
    async def delete_role(name: str, caller: Authenticated, request: Request) -> None:
        caller.check_administrator()
        before = await roles.get(check_name("role", name))
        if before is None or not await roles.delete(name):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"role {name} does not exist")
        await context.core.access.refresh_role(name)
        record(request, f"role {name}", role_doc(name, before), None)

    return api

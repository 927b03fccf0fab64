"""Users and their AMQP permissions (the logins of Kafka SASL and AMQP alike).

    GET    /users                           name, tenant, namespace, tags of each
    GET    /users/{name}
    PUT    /users/{name}                    {"password", "tenant", "namespace", "tags", "permissions", "roles"}
    DELETE /users/{name}                    and its open connections are closed
    GET    /permissions                     every user's permissions
    PUT    /permissions/{tenant}/{namespace}/{user}     {"configure", "write", "read"} (regexes)
    DELETE /permissions/{tenant}/{namespace}/{user}     namespace "*": every namespace of the tenant

PUT /users creates a user (a password is needed) or changes one: a new password replaces its SCRAM
keys; fields left out keep their value. Only SCRAM keys are stored, never the password. A change
applies to logins from then on; a deleted user's connections are closed in every gateway process
(core/connections.py watches the user in the metadata store).

A permission is a grant of the one authorization model (core/access.py): it governs AMQP and Kafka
alike, and a change applies to the user's open connections at once (its next publish, produce or
fetch is decided by the new grant). Each change is audited with the user's document before and after.
"""

# No `from __future__ import annotations` here: FastAPI must see the routes' annotations as
# objects (they name dependencies local to router()).

import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response, status
from pydantic import BaseModel, Field

from core.auth import ANY_NAMESPACE, Permission, User
from core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT, check_name
from gateway.admin.audit import record
from gateway.admin.security import ADMINISTRATOR, Caller

MAX_PASSWORD = 1024


class UserBody(BaseModel):
    password: str | None = Field(None, min_length=1, max_length=MAX_PASSWORD)
    tenant: str | None = None
    namespace: str | None = None
    tags: list[str] | None = None
    permissions: list[dict[str, str]] | None = None   # [{"tenant", "namespace", "configure", "write", "read"}]
    roles: list[str] | None = None                     # names of roles (gateway/admin/roles.py): administrators only

    model_config = {"extra": "forbid"}


class PermissionBody(BaseModel):
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"

    model_config = {"extra": "forbid"}


def user_doc(user: User) -> dict[str, Any]:
    principal = user.principal
    return {"name": principal.user, "tenant": principal.tenant, "namespace": principal.namespace,
            "tags": list(user.tags), "roles": list(user.roles), "mechanisms": sorted(user.scram),
            "permissions": None if user.permissions is None else [p.to_doc() for p in user.permissions]}


def checked_permission(doc: dict[str, str]) -> Permission:
    """A permission from its document, or 400."""
    try:
        namespace = doc["namespace"]
        if namespace != ANY_NAMESPACE:
            check_name("namespace", namespace)
        permission = Permission(check_name("tenant", doc["tenant"]), namespace,
                                doc.get("configure", ".*"), doc.get("write", ".*"), doc.get("read", ".*"))
    except (KeyError, TypeError):
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "a permission needs a tenant and a namespace") from None
    _check_patterns(permission)
    return permission


def _check_patterns(permission: Permission) -> None:
    for key in ("configure", "write", "read"):
        try:
            re.compile(getattr(permission, key))
        except (re.error, TypeError) as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, f"{key} is not a regular expression: {exc}") from None


def router(context, authenticate) -> APIRouter:
    api = APIRouter(tags=["users"])
    users = context.users
    tenancy = context.tenancy
    Authenticated = Annotated[Caller, Depends(authenticate)]

    async def visible_user(caller: Caller, name: str, *, changing: bool = False) -> User:
        check_name("user", name)
        user = await users.get(name)
        if user is None or not caller.sees(user.principal.tenant):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"user {name} does not exist")
        if changing and ADMINISTRATOR in user.tags:
            caller.check_administrator()   # a tenant admin may not take over an administrator
        return user

    async def existing_namespace(caller: Caller, tenant: str, namespace: str) -> None:
        caller.check_tenant(tenant)
        if namespace == ANY_NAMESPACE:   # every namespace of the tenant
            if not await tenancy.tenant_exists(tenant):
                raise HTTPException(status.HTTP_400_BAD_REQUEST, f"tenant {tenant} does not exist")
        elif not await tenancy.namespace_exists(tenant, namespace):
            raise HTTPException(status.HTTP_400_BAD_REQUEST, f"namespace {tenant}/{namespace} does not exist")

    @api.get("/users")
    async def list_users(caller: Authenticated) -> list[dict[str, Any]]:
        found = [await users.get(name) for name in await users.names()]
        return [user_doc(user) for user in found if user is not None and caller.sees(user.principal.tenant)]

    @api.get("/users/{name}")
    async def get_user(name: str, caller: Authenticated) -> dict[str, Any]:
        return user_doc(await visible_user(caller, name))

    @api.put("/users/{name}", status_code=status.HTTP_201_CREATED)
    async def put_user(name: str, body: UserBody, caller: Authenticated, response: Response,
                       request: Request) -> dict[str, Any]:
        """Create (201) or change (200) a user."""
        check_name("user", name)
        existing = await users.get(name)
        before = user_doc(existing) if existing is not None else None
        if existing is not None and not caller.sees(existing.principal.tenant):
            raise HTTPException(status.HTTP_409_CONFLICT, f"user name {name} is taken")
        if existing is not None:
            await visible_user(caller, name, changing=True)
            response.status_code = status.HTTP_200_OK
        if existing is None and body.password is None:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, "a new user needs a password")
        tenant = body.tenant or (existing.principal.tenant if existing else caller.tenant_scope or DEFAULT_TENANT)
        namespace = body.namespace or (existing.principal.namespace if existing else DEFAULT_NAMESPACE)
        tags = tuple(body.tags) if body.tags is not None else (existing.tags if existing else ())
        if any(not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tag) for tag in tags):
            raise HTTPException(status.HTTP_400_BAD_REQUEST, "a tag is 1-64 of [A-Za-z0-9_-]")
        if ADMINISTRATOR in tags:
            caller.check_administrator()
        roles = tuple(body.roles) if body.roles is not None else (existing.roles if existing else ())
        if body.roles is not None:
            caller.check_administrator()   # a role spans tenants
            for role in roles:
                check_name("role", role)
        await existing_namespace(caller, check_name("tenant", tenant), check_name("namespace", namespace))
        if body.permissions is not None:
            permissions = [checked_permission(doc) for doc in body.permissions]
            for permission in permissions:
                await existing_namespace(caller, permission.tenant, permission.namespace)
        else:
            permissions = existing.permissions if existing else None
        if body.password is not None:
            await users.put_user(name, body.password, tenant=tenant, namespace=namespace,
                                 permissions=permissions, tags=tags, roles=roles)
        else:
            def change(doc: dict) -> None:
                doc.update(tenant=tenant, namespace=namespace, tags=list(tags), roles=list(roles))
                if permissions is None:
                    doc.pop("permissions", None)
                else:
                    doc["permissions"] = [p.to_doc() for p in permissions]
            if not await users.update(name, change):
                raise HTTPException(status.HTTP_404_NOT_FOUND, f"user {name} does not exist")
        await context.core.access.refresh(name)
        after = user_doc(await users.get(name))
        record(request, f"user {name}", before, after)
        return after

    @api.delete("/users/{name}", status_code=status.HTTP_204_NO_CONTENT)
    async def delete_user(name: str, caller: Authenticated, request: Request) -> None:
        user = await visible_user(caller, name, changing=True)
        if name == caller.user:
            raise HTTPException(status.HTTP_409_CONFLICT, "a user cannot delete itself")
        await users.delete_user(name)
        await context.core.access.refresh(name)
        record(request, f"user {name}", user_doc(user), None)
        # This process's connections at once; other processes' through their watch on the user.
        context.core.connections.close_user(name, f"user {name} was deleted")

    @api.get("/permissions")
    async def list_permissions(caller: Authenticated) -> list[dict[str, Any]]:
        found = []
        for name in await users.names():
            user = await users.get(name)
            if user is None:
                continue
            permissions = user.permissions
            if permissions is None:   # implicitly everything on its own namespace
                permissions = (Permission(user.principal.tenant, user.principal.namespace),)
            found += [{"user": name, **p.to_doc()} for p in permissions if caller.sees(p.tenant)]
        return found

    @api.put("/permissions/{tenant}/{namespace}/{name}")
    async def put_permission(tenant: str, namespace: str, name: str, body: PermissionBody,
                             caller: Authenticated, request: Request) -> dict[str, Any]:
        user = await visible_user(caller, name, changing=True)
        await existing_namespace(caller, tenant, namespace)
        permission = Permission(tenant, namespace, body.configure, body.write, body.read)
        _check_patterns(permission)
        before = user.permission_on(tenant, namespace)
        await users.update(name, lambda doc: replace_permission(doc, user, permission, tenant, namespace))
        await context.core.access.refresh(name)   # open connections: their next check sees it
        record(request, f"permission {tenant}/{namespace}/{name}", before and before.to_doc(), permission.to_doc())
        return {"user": name, **permission.to_doc()}

    @api.delete("/permissions/{tenant}/{namespace}/{name}", status_code=status.HTTP_204_NO_CONTENT)
    async def delete_permission(tenant: str, namespace: str, name: str, caller: Authenticated,
                                request: Request) -> None:
        user = await visible_user(caller, name, changing=True)
        caller.check_tenant(tenant)
        before = user.permission_on(tenant, namespace)
        if before is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"user {name} has no permission on {tenant}/{namespace}")
        await users.update(name, lambda doc: replace_permission(doc, user, None, tenant, namespace))
        await context.core.access.refresh(name)
        record(request, f"permission {tenant}/{namespace}/{name}", before.to_doc(), None)

    return api


def replace_permission(doc: dict, user: User, permission: Permission | None, tenant: str, namespace: str) -> None:
    """Set (or remove, with None) the permission on tenant/namespace. A user without explicit
    permissions has everything on its own namespace: that becomes explicit first, so it is kept."""
    current = doc.get("permissions")
    if current is None:
        own = user.principal
        current = [Permission(own.tenant, own.namespace).to_doc()]
    current = [p for p in current if (p["tenant"], p["namespace"]) != (tenant, namespace)]
    if permission is not None:
        current.append(permission.to_doc())
    doc["permissions"] = current

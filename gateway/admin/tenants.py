"""Tenants, namespaces and namespace policies.

    GET    /tenants                                   the tenants the caller may see
    PUT    /tenants/{tenant}                          create (201) or keep (200)
    GET    /tenants/{tenant}                          its namespaces
    DELETE /tenants/{tenant}?force=true               409 while it holds topics, unless forced
    GET    /tenants/{tenant}/namespaces
    PUT    /tenants/{tenant}/namespaces/{ns}          create; an optional body {"policies": {...}}
    GET    /tenants/{tenant}/namespaces/{ns}          its policies and what it holds
    DELETE /tenants/{tenant}/namespaces/{ns}?force=true
    GET|PUT /tenants/{tenant}/namespaces/{ns}/policies
"""

# No `from __future__ import annotations` here: FastAPI must see the routes' annotations as
# objects (they name dependencies local to router()).

import functools
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, HTTPException, Response, status

from core.policies import NamespacePolicies
from gateway.admin import security
from gateway.admin.security import Caller


def router(context, authenticate) -> APIRouter:
    api = APIRouter(tags=["tenants"])
    tenancy = context.tenancy
    Authenticated = Annotated[Caller, Depends(authenticate)]

    visible_tenant = functools.partial(security.visible_tenant, tenancy)
    visible_namespace = functools.partial(security.visible_namespace, tenancy)

    @api.get("/tenants")
    async def list_tenants(caller: Authenticated) -> list[str]:
        return [tenant for tenant in await tenancy.tenants() if caller.sees(tenant)]

    @api.put("/tenants/{tenant}", status_code=status.HTTP_201_CREATED)
    async def put_tenant(tenant: str, caller: Authenticated, response: Response) -> dict[str, Any]:
        caller.check_administrator()
        if not await tenancy.create_tenant(tenant):
            response.status_code = status.HTTP_200_OK
        return {"tenant": tenant, "namespaces": await tenancy.namespaces(tenant)}

    @api.get("/tenants/{tenant}")
    async def get_tenant(tenant: str, caller: Authenticated) -> dict[str, Any]:
        await visible_tenant(caller, tenant)
        return {"tenant": tenant, "namespaces": await tenancy.namespaces(tenant)}

    @api.delete("/tenants/{tenant}", status_code=status.HTTP_204_NO_CONTENT)
    async def delete_tenant(tenant: str, caller: Authenticated, force: bool = False) -> None:
        caller.check_administrator()
        await visible_tenant(caller, tenant)
        await tenancy.delete_tenant(tenant, force=force)

    @api.get("/tenants/{tenant}/namespaces")
    async def list_namespaces(tenant: str, caller: Authenticated) -> list[str]:
        await visible_tenant(caller, tenant)
        return await tenancy.namespaces(tenant)

    @api.put("/tenants/{tenant}/namespaces/{namespace}", status_code=status.HTTP_201_CREATED)
    async def put_namespace(tenant: str, namespace: str, caller: Authenticated, response: Response,
                            body: Annotated[dict[str, Any] | None, Body()] = None) -> dict[str, Any]:
        await visible_tenant(caller, tenant)
        unknown = set(body or {}) - {"policies"}
        if unknown:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, f"unknown field(s): {', '.join(sorted(unknown))}")
        policies = None if not body or body.get("policies") is None else NamespacePolicies.from_doc(body["policies"])
        if not await tenancy.create_namespace(tenant, namespace, policies):
            response.status_code = status.HTTP_200_OK
        return await describe_namespace(tenant, namespace)

    @api.get("/tenants/{tenant}/namespaces/{namespace}")
    async def get_namespace(tenant: str, namespace: str, caller: Authenticated) -> dict[str, Any]:
        await visible_namespace(caller, tenant, namespace)
        return await describe_namespace(tenant, namespace)

    @api.delete("/tenants/{tenant}/namespaces/{namespace}", status_code=status.HTTP_204_NO_CONTENT)
    async def delete_namespace(tenant: str, namespace: str, caller: Authenticated, force: bool = False) -> None:
        await visible_namespace(caller, tenant, namespace)
        await tenancy.delete_namespace(tenant, namespace, force=force)

    @api.get("/tenants/{tenant}/namespaces/{namespace}/policies")
    async def get_policies(tenant: str, namespace: str, caller: Authenticated) -> dict[str, Any]:
        await visible_namespace(caller, tenant, namespace)
        return (await tenancy.policies.get(tenant, namespace)).to_doc()

    @api.put("/tenants/{tenant}/namespaces/{namespace}/policies")
    async def put_policies(tenant: str, namespace: str, caller: Authenticated,
                           policies: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
        """Replace the namespace's policies (fields left out: no limit)."""
        await visible_namespace(caller, tenant, namespace)
        parsed = NamespacePolicies.from_doc(policies)
        await tenancy.policies.put(tenant, namespace, parsed)
        return parsed.to_doc()

    async def describe_namespace(tenant: str, namespace: str) -> dict[str, Any]:
        metadata = context.core.metadata
        return {"tenant": tenant, "namespace": namespace,
                "policies": (await tenancy.policies.get(tenant, namespace)).to_doc(),
                "topics": len(await context.core.registry.list_topics(tenant, namespace)),
                "queues": len(await metadata.children(f"/queues/{tenant}/{namespace}")),
                "groups": len(await metadata.children(f"/groups/{tenant}/{namespace}"))}

    return api

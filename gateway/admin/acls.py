"""ACL bindings, the model's fine-grained entries (core/acl.py), written by operators over HTTP.

    POST   /tenants/{tenant}/acls     {"resource_type", "name", "pattern_type", "principal", "host",
                                       "operation", "permission"} (Kafka's names): 201, or 200 if stored
    DELETE /tenants/{tenant}/acls     the same document: that binding; 404 if there is none

What Kafka's CreateAcls and DeleteAcls do, without a Kafka super user: an administrator in any
tenant, a tenant admin in its own (GET /acls lists them, gateway/admin/resources.py). Each change is
audited with the binding before and after.
"""

# No `from __future__ import annotations` here: FastAPI must see the routes' annotations as
# objects (they name dependencies local to router()).

import functools
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response, status
from pydantic import BaseModel

from core.acl import (CLUSTER_NAME, AclBinding, AclBindingFilter, EntryFilter, Operation, PatternType, Permission,
                      ResourcePatternFilter, ResourceType, check_binding)
from core.errors import InvalidAcl
from gateway.admin import security
from gateway.admin.audit import record
from gateway.admin.security import Caller


class AclBody(BaseModel):
    resource_type: str
    name: str
    pattern_type: str = "LITERAL"
    principal: str
    host: str = "*"
    operation: str
    permission: str = "ALLOW"

    model_config = {"extra": "forbid"}

    def binding(self) -> AclBinding:
        try:
            binding = AclBinding.of(ResourceType(self.resource_type.upper()), self.name,
                                    PatternType(self.pattern_type.upper()), self.principal, self.host,
                                    Operation(self.operation.upper()), Permission(self.permission.upper()))
        except ValueError as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
        check_binding(binding)
        if ":" not in binding.entry.principal:
            raise InvalidAcl("a principal is \"User:<name>\"")
        if binding.pattern.resource_type is ResourceType.CLUSTER and binding.pattern.name != CLUSTER_NAME:
            raise InvalidAcl(f"the only name of the CLUSTER resource is {CLUSTER_NAME}")
        return binding


def router(context, authenticate) -> APIRouter:
    api = APIRouter(tags=["acls"])
    Authenticated = Annotated[Caller, Depends(authenticate)]
    visible_tenant = functools.partial(security.visible_tenant, context.tenancy)

    def authorizer():
        if context.kafka is None:
            raise HTTPException(status.HTTP_409_CONFLICT, "this gateway has no Kafka listener")
        return context.kafka.authorizer

    @api.post("/tenants/{tenant}/acls", status_code=status.HTTP_201_CREATED)
    async def create_acl(tenant: str, body: AclBody, caller: Authenticated, request: Request,
                         response: Response) -> dict[str, Any]:
        await visible_tenant(caller, tenant)
        binding = body.binding()
        acls = authorizer()
        if binding in await acls.acls(tenant):
            response.status_code = status.HTTP_200_OK
            return binding.to_doc()
        [error] = await acls.create_acls(tenant, [binding])
        if error is not None:
            raise error
        record(request, f"acl of tenant {tenant}", None, binding.to_doc())
        return binding.to_doc()

    @api.delete("/tenants/{tenant}/acls", status_code=status.HTTP_204_NO_CONTENT)
    async def delete_acl(tenant: str, body: AclBody, caller: Authenticated, request: Request) -> None:
        await visible_tenant(caller, tenant)
        binding = body.binding()
        pattern, entry = binding.pattern, binding.entry
        exact = AclBindingFilter(ResourcePatternFilter(pattern.resource_type, pattern.name, pattern.pattern_type),
                                 EntryFilter(entry.principal, entry.host, entry.operation, entry.permission))
        [deleted] = await authorizer().delete_acls(tenant, [exact])
        if not deleted:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such ACL")
        failed = next((d.error for d in deleted if d.error is not None), None)
        if failed is not None:
            raise failed
        record(request, f"acl of tenant {tenant}", binding.to_doc(), None)

    return api

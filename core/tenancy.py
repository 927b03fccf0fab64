"""Tenants and namespaces at runtime: create, list, delete (forced deletion removes what they hold).

The registry (registry.py) owns the rows /tenants/<tenant> and /namespaces/<tenant>/<namespace>;
this module adds the lifecycle around them. A namespace holds topics (/topics), AMQP exchanges,
queues and bindings (/exchanges, /queues, /bindings), Kafka groups (/groups), policies (/policies)
and the users' permissions that name it. Deleting it while it holds topics or queues is refused
unless forced; a forced deletion removes every one of those, then the namespace row last, so a
deletion that fails halfway is finished by asking again (every step tolerates what is gone).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

from core.auth import ANY_NAMESPACE, UserStore
from core.errors import UnknownTenant, UnknownTopic
from core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT, TopicName, check_name
from core.policies import NamespacePolicies, PolicyStore
from storage.api import NodeExists, NoNode

log = logging.getLogger("gateway.core.tenancy")

# Rows of a namespace beside its topics, each /<kind>/<tenant>/<namespace>/<key>.
_NAMESPACE_ROWS = ("queues", "exchanges", "bindings", "groups")

Progress = Callable[[int, int], None]          # (done, total) while topics are deleted
Forget = Callable[[str, str], Awaitable[None]]  # drops a namespace's state held in memory


class TenancyConflict(Exception):
    """A change the tenancy refuses as it stands. Never reaches a client protocol (no wire code)."""


class NotEmpty(TenancyConflict):
    """The tenant or namespace still holds topics or queues; only a forced deletion removes them."""


class Reserved(TenancyConflict):
    """The default tenant/namespace cannot be deleted: unauthenticated clients land there."""


class Tenancy:
    def __init__(self, core) -> None:
        self._core = core
        self._metadata = core.metadata
        self.policies = PolicyStore(core.metadata)
        self._forgetters: list[Forget] = []

    def on_namespace_deleted(self, forget: Forget) -> None:
        """Have `forget` called before a namespace's rows are deleted (e.g. to drop cached queues)."""
        self._forgetters.append(forget)

    # --- tenants ------------------------------------------------------------------------------

    async def tenants(self) -> list[str]:
        return await self._core.registry.tenants()

    async def tenant_exists(self, tenant: str) -> bool:
        return await self._metadata.get(f"/tenants/{check_name('tenant', tenant)}") is not None

    async def create_tenant(self, tenant: str) -> bool:
        """True if created, False if it existed."""
        check_name("tenant", tenant)
        stamp = json.dumps({"created_ms": self._core.clock.now_ms()}).encode()
        try:
            await self._metadata.create(f"/tenants/{tenant}", stamp)
        except NodeExists:
            return False
        return True

    async def delete_tenant(self, tenant: str, *, force: bool = False, progress: Progress | None = None) -> None:
        if not await self.tenant_exists(tenant):
            raise UnknownTenant(f"tenant {tenant} does not exist")
        if tenant == DEFAULT_TENANT:
            raise Reserved(f"tenant {tenant} is the default tenant and cannot be deleted")
        namespaces = await self.namespaces(tenant)
        if not force:
            for namespace in namespaces:
                await self._check_empty(tenant, namespace)
        for namespace in namespaces:
            await self.delete_namespace(tenant, namespace, force=force, progress=progress)
        await self._remove_permissions(tenant, ANY_NAMESPACE)   # the grants on every namespace of it
        await _delete_quietly(self._metadata, f"/tenants/{tenant}")

    # --- namespaces ---------------------------------------------------------------------------

    async def namespaces(self, tenant: str) -> list[str]:
        return await self._core.registry.namespaces(check_name("tenant", tenant))

    async def namespace_exists(self, tenant: str, namespace: str) -> bool:
        path = f"/namespaces/{check_name('tenant', tenant)}/{check_name('namespace', namespace)}"
        return await self._metadata.get(path) is not None

    async def create_namespace(self, tenant: str, namespace: str, policies: NamespacePolicies | None = None) -> bool:
        """True if created, False if it existed (its policies are then replaced when given)."""
        check_name("namespace", namespace)
        if not await self.tenant_exists(tenant):
            raise UnknownTenant(f"tenant {tenant} does not exist")
        if policies is not None:   # first, so a namespace never exists without the policies asked for
            await self.policies.put(tenant, namespace, policies)
        stamp = json.dumps({"created_ms": self._core.clock.now_ms()}).encode()
        try:
            await self._metadata.create(f"/namespaces/{tenant}/{namespace}", stamp)
        except NodeExists:
            return False
        return True

    async def delete_namespace(self, tenant: str, namespace: str, *, force: bool = False,
                               progress: Progress | None = None) -> None:
        if not await self.namespace_exists(tenant, namespace):
            raise UnknownTenant(f"namespace {tenant}/{namespace} does not exist")
        if (tenant, namespace) == (DEFAULT_TENANT, DEFAULT_NAMESPACE):
            raise Reserved(f"namespace {tenant}/{namespace} is the default namespace and cannot be deleted")
        if not force:
            await self._check_empty(tenant, namespace)
        for connection in self._core.connections.all():
            if (connection.tenant, connection.namespace) == (tenant, namespace):
                self._core.connections.close(connection.id, f"namespace {tenant}/{namespace} was deleted")
        for forget in self._forgetters:
            await forget(tenant, namespace)
        topics = await self._core.registry.list_topics(tenant, namespace)
        for done, topic in enumerate(topics, 1):
            try:
                await self._core.delete_topic(TopicName(tenant, namespace, topic))
            except UnknownTopic:
                pass   # deleted meanwhile
            if progress is not None:
                progress(done, len(topics))
        for kind in _NAMESPACE_ROWS:
            for key in await self._metadata.children(f"/{kind}/{tenant}/{namespace}"):
                await _delete_quietly(self._metadata, f"/{kind}/{tenant}/{namespace}/{key}")
        await self._remove_permissions(tenant, namespace)
        await self.policies.delete(tenant, namespace)
        await _delete_quietly(self._metadata, f"/namespaces/{tenant}/{namespace}")
        log.info("namespace %s/%s deleted (%d topics)", tenant, namespace, len(topics))

    async def _check_empty(self, tenant: str, namespace: str) -> None:
        topics = await self._core.registry.list_topics(tenant, namespace)
        queues = await self._metadata.children(f"/queues/{tenant}/{namespace}")
        if topics or queues:
            raise NotEmpty(f"namespace {tenant}/{namespace} holds {len(topics)} topic(s) and {len(queues)} queue(s);"
                           f" delete them first or force the deletion")

    async def _remove_permissions(self, tenant: str, namespace: str) -> None:
        users = UserStore(self._metadata)

        def strip(doc: dict) -> None:
            doc["permissions"] = [p for p in doc["permissions"] if (p["tenant"], p["namespace"]) != (tenant, namespace)]

        for name in await users.names():
            user = await users.get(name)
            if user is not None and user.permissions is not None and user.permission_on(tenant, namespace):
                await users.update(name, strip)


async def _delete_quietly(metadata, path: str) -> None:
    try:
        await metadata.delete(path)
    except NoNode:
        pass

"""Vhosts as namespaces (the AMQP front end's mapping, protocols/amqp/vhosts.py), seen by an admin caller,
and the path escaping RabbitMQ's API relies on.

RabbitMQ's URLs carry a vhost as one path segment, so "/" travels as %2F: /api/queues/%2F/orders.
HTTP servers decode the path before routing, which would turn that into /api/queues///orders; the
middleware here routes on the raw path instead, each segment decoded on its own.
"""

from __future__ import annotations

from urllib.parse import unquote

from fastapi import HTTPException, status

from protocols.amqp.vhosts import vhost_name, vhost_namespace

SLASH = "\x00"   # a decoded "/" inside a segment, until the route hands the segment over


def segment(value: str) -> str:
    """A path parameter as the client meant it (its %2F back to "/")."""
    return value.replace(SLASH, "/")


async def visible_vhosts(tenancy, caller) -> list[tuple[str, str, str]]:
    """(vhost, tenant, namespace) of every namespace the caller may see, in vhost order."""
    found = []
    for tenant in await tenancy.tenants():
        if caller.sees(tenant):
            found += [(vhost_name(tenant, ns), tenant, ns) for ns in await tenancy.namespaces(tenant)]
    return sorted(found)


async def visible_vhost(tenancy, caller, vhost: str) -> tuple[str, str]:
    """(tenant, namespace) of a vhost the caller may see; 404 otherwise (the same answer either way)."""
    names = vhost_namespace(segment(vhost))
    if names is None or not caller.sees(names[0]) or not await tenancy.namespace_exists(*names):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"vhost {segment(vhost)!r} does not exist")
    return names


class RawPathSegments:
    """ASGI middleware: route on the raw path, so an encoded "/" stays inside its segment."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        raw = scope.get("raw_path")
        if scope["type"] == "http" and raw:
            decoded = "/".join(unquote(part).replace("/", SLASH)
                               for part in raw.decode("latin-1").split("?", 1)[0].split("/"))
            scope = {**scope, "path": decoded}
        await self.app(scope, receive, send)

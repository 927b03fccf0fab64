"""Declarations and deletions of RabbitMQ's management API: vhosts, users, permissions, exchanges,
queues and bindings. Each returns True when it created something (201) and False when it found it
there already (204), as RabbitMQ answers."""

from __future__ import annotations

import re
from urllib.parse import unquote
from collections.abc import Mapping
from typing import Any

from fastapi import HTTPException, status

from core.auth import Permission
from core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT, check_name
from core.queues.exchange import Binding, DestinationKind, ExchangeType
from gateway.admin.rabbitmq import shapes
from gateway.admin.rabbitmq.queries import RabbitState, existing_queue
from gateway.admin.rabbitmq.vhosts import segment, visible_vhost
from gateway.admin.security import ADMINISTRATOR
from gateway.admin.users import replace_permission
from protocols.amqp.vhosts import vhost_namespace

OPERATOR = object()   # the owner of what an operator declares (never exclusive: RabbitMQ's HTTP API has no owner)
_TAG = re.compile(r"[A-Za-z0-9_-]{1,64}")


def bad_request(reason: str) -> HTTPException:
    return HTTPException(status.HTTP_400_BAD_REQUEST, reason)


def _flag(body: Mapping[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if isinstance(value, str):          # rabbitmqadmin sends "true"/"false"
        if value.lower() not in ("true", "false"):
            raise bad_request(f"{key} must be true or false")
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise bad_request(f"{key} must be true or false")
    return value


def _arguments(body: Mapping[str, Any]) -> dict[str, Any]:
    arguments = body.get("arguments") or {}
    if not isinstance(arguments, Mapping):
        raise bad_request("arguments must be an object")
    return dict(arguments)


# --- vhosts ---------------------------------------------------------------------------------------

async def put_vhost(state: RabbitState, caller, vhost: str) -> bool:
    names = vhost_namespace(segment(vhost))
    if names is None:
        raise bad_request(f"vhost {segment(vhost)!r} names no tenant/namespace ([A-Za-z0-9._-], at most one '/')")
    tenant, namespace = names
    caller.check_tenant(tenant)
    if not await state.tenancy.tenant_exists(tenant):
        caller.check_administrator()
        await state.tenancy.create_tenant(tenant)
    return await state.tenancy.create_namespace(tenant, namespace)


async def delete_vhost(state: RabbitState, caller, vhost: str) -> None:
    tenant, namespace = await visible_vhost(state.tenancy, caller, vhost)
    await state.tenancy.delete_namespace(tenant, namespace, force=True)   # RabbitMQ takes what it holds along


# --- users and permissions ------------------------------------------------------------------------

def parse_tags(value: Any) -> tuple[str, ...]:
    """RabbitMQ takes tags as "a,b" or ["a", "b"]."""
    tags = [t.strip() for t in value.split(",")] if isinstance(value, str) else value
    if not isinstance(tags, list) or any(not isinstance(t, str) for t in tags):
        raise bad_request("tags must be a comma-separated string or a list of strings")
    tags = [t for t in tags if t]
    if any(not _TAG.fullmatch(t) for t in tags):
        raise bad_request("a tag is 1-64 of [A-Za-z0-9_-]")
    return tuple(tags)


async def put_user(state: RabbitState, caller, name: str, body: Mapping[str, Any]) -> bool:
    check_name("user", name)
    users = state.context.users
    existing = await users.get(name)
    if existing is not None and not caller.sees(existing.principal.tenant):
        raise HTTPException(status.HTTP_409_CONFLICT, f"user name {name} is taken")
    tags = parse_tags(body.get("tags", "")) if "tags" in body else (existing.tags if existing else ())
    if ADMINISTRATOR in tags or (existing is not None and ADMINISTRATOR in existing.tags):
        caller.check_administrator()
    password = body.get("password")
    if password is not None and (not isinstance(password, str) or not password or len(password) > 1024):
        raise bad_request("password must be a non-empty string")
    if existing is None and password is None:
        # Only SCRAM keys are kept, and they cannot be made from RabbitMQ's password_hash.
        raise bad_request("a new user needs a password (a password_hash cannot be imported)")
    if password is not None:
        tenant = existing.principal.tenant if existing else caller.tenant_scope or DEFAULT_TENANT
        namespace = existing.principal.namespace if existing else DEFAULT_NAMESPACE
        # As in RabbitMQ, a new user may open no vhost until it is given permissions.
        await users.put_user(name, password, tenant=tenant, namespace=namespace,
                             permissions=existing.permissions if existing else (), tags=tags)
    else:
        await users.update(name, lambda doc: doc.update(tags=list(tags)))
    return existing is None


async def delete_user(state: RabbitState, caller, name: str) -> None:
    user = await state.context.users.get(check_name("user", name))
    if user is None or not caller.sees(user.principal.tenant):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"user {name} does not exist")
    if ADMINISTRATOR in user.tags:
        caller.check_administrator()
    if name == caller.user:
        raise HTTPException(status.HTTP_409_CONFLICT, "a user cannot delete itself")
    await state.context.users.delete_user(name)
    state.core.connections.close_user(name, f"user {name} was deleted")


async def put_permission(state: RabbitState, caller, vhost: str, name: str, body: Mapping[str, Any]) -> bool:
    tenant, namespace = await visible_vhost(state.tenancy, caller, vhost)
    user = await state.context.users.get(check_name("user", name))
    if user is None or not caller.sees(user.principal.tenant):
        raise bad_request(f"user {name} does not exist")
    patterns = {key: body.get(key, "") for key in ("configure", "write", "read")}
    for key, pattern in patterns.items():
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise bad_request(f"{key} is not a regular expression: {exc}") from None
    created = user.permission_on(tenant, namespace) is None or user.permissions is None
    permission = Permission(tenant, namespace, **patterns)
    await state.context.users.update(name, lambda doc: replace_permission(doc, user, permission, tenant, namespace))
    await state.context.core.access.refresh(name)   # open connections: their next check sees it
    return created


async def delete_permission(state: RabbitState, caller, vhost: str, name: str) -> None:
    tenant, namespace = await visible_vhost(state.tenancy, caller, vhost)
    user = await state.context.users.get(check_name("user", name))
    if user is None or not caller.sees(user.principal.tenant) or user.permission_on(tenant, namespace) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"user {name} has no permissions on {segment(vhost)!r}")
    await state.context.users.update(name, lambda doc: replace_permission(doc, user, None, tenant, namespace))
    await state.context.core.access.refresh(name)


# --- exchanges, queues, bindings ------------------------------------------------------------------

async def space_of(state: RabbitState, caller, vhost: str):
    tenant, namespace = await visible_vhost(state.tenancy, caller, vhost)
    return await state.context.amqp.queues.namespace(tenant, namespace)


async def put_exchange(state: RabbitState, caller, vhost: str, name: str, body: Mapping[str, Any]) -> bool:
    space = await space_of(state, caller, vhost)
    try:
        exchange_type = ExchangeType(body.get("type"))
    except ValueError:
        raise bad_request(f"unknown exchange type {body.get('type')!r}") from None
    existed = name in space.routing.exchanges
    await space.declare_exchange(name, exchange_type, durable=_flag(body, "durable", True),
                                 auto_delete=_flag(body, "auto_delete", False),
                                 internal=_flag(body, "internal", False), arguments=_arguments(body))
    return not existed


async def delete_exchange(state: RabbitState, caller, vhost: str, name: str, *, if_unused: bool) -> None:
    space = await space_of(state, caller, vhost)
    space.exchange(name)     # 404 when absent
    await space.delete_exchange(name, if_unused=if_unused)


async def put_queue(state: RabbitState, caller, vhost: str, name: str, body: Mapping[str, Any]) -> bool:
    space = await space_of(state, caller, vhost)
    if not name or name.startswith("amq."):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"queue name {name!r} is reserved")
    existed = name in space.queues
    await space.declare_queue(name, durable=_flag(body, "durable", True),
                              auto_delete=_flag(body, "auto_delete", False), arguments=_arguments(body),
                              owner=OPERATOR)
    return not existed


async def delete_queue(state: RabbitState, caller, vhost: str, name: str, *, if_unused: bool,
                       if_empty: bool) -> None:
    space = await space_of(state, caller, vhost)
    existing_queue(space, name)
    await space.delete_queue(name, if_unused=if_unused, if_empty=if_empty, owner=existing_queue(space, name).owner)


async def purge_queue(state: RabbitState, caller, vhost: str, name: str) -> int:
    space = await space_of(state, caller, vhost)
    return await space.purge_queue(name, owner=existing_queue(space, name).owner)


def _binding(source: str, kind: str, destination: str, body: Mapping[str, Any]) -> Binding:
    key = body.get("routing_key", "")
    if not isinstance(key, str):
        raise bad_request("routing_key must be a string")
    return Binding(source, destination, _kind(kind), key, _arguments(body))


def _kind(letter: str) -> DestinationKind:
    if letter not in ("q", "e"):
        raise HTTPException(status.HTTP_404_NOT_FOUND, "a binding's destination is q (queue) or e (exchange)")
    return DestinationKind.QUEUE if letter == "q" else DestinationKind.EXCHANGE


async def add_binding(state: RabbitState, caller, vhost: str, source: str, kind: str, destination: str,
                      body: Mapping[str, Any]) -> str:
    """The new binding's properties key (RabbitMQ answers it in the Location header)."""
    space = await space_of(state, caller, vhost)
    binding = _binding(source, kind, destination, body)
    if binding.kind is DestinationKind.QUEUE:
        existing_queue(space, destination)
        owner = space.queues[destination].owner
    else:
        owner = None
    await space.bind(binding, owner=owner)
    return shapes.properties_key(binding.key, binding.arguments)


async def bindings_between(state: RabbitState, caller, vhost: str, source: str, kind: str,
                           destination: str) -> list[Binding]:
    space = await space_of(state, caller, vhost)
    wanted = _kind(kind)
    return [b for b in space.routing.bindings.get(source, {}).values()
            if b.kind is wanted and b.destination == destination]


async def delete_binding(state: RabbitState, caller, vhost: str, source: str, kind: str, destination: str,
                         props: str) -> None:
    space = await space_of(state, caller, vhost)
    for binding in await bindings_between(state, caller, vhost, source, kind, destination):
        key = shapes.properties_key(binding.key, binding.arguments)
        if props in (key, unquote(key)):
            owner = space.queues[destination].owner if binding.kind is DestinationKind.QUEUE else None
            await space.unbind(binding, owner=owner)
            return
    raise HTTPException(status.HTTP_404_NOT_FOUND, "no such binding")


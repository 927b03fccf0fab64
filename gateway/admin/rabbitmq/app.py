"""The HTTP side of RabbitMQ's management API: a FastAPI app mounted at /api (beside the gateway's
own /api/v1), routes that only parse and answer, errors as RabbitMQ writes them
({"error": ..., "reason": ...}; rabbitmqadmin prints the reason). The same login as /api/v1:
HTTP Basic, the administrator tag everywhere, a tenant-admin limited to its tenant's vhosts."""

# No `from __future__ import annotations` here: FastAPI must see the routes' annotations as
# objects (they name dependencies local to rabbitmq_app()).

import json
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from core.errors import (CoreError, InequivalentDeclaration, InvalidArgument, InvalidName, NotPermitted,
                         ReservedName, ResourceInUse, ResourceLocked, UnknownExchange, UnknownQueue)
from core.tenancy import TenancyConflict
from gateway.admin.rabbitmq import changes, definitions, messages, queries
from gateway.admin.rabbitmq.queries import RabbitState
from gateway.admin.rabbitmq.vhosts import RawPathSegments, segment
from gateway.admin.security import Caller

_STATUS = (
    ((UnknownQueue, UnknownExchange), 404, "not_found"),
    ((NotPermitted, ReservedName), 403, "access_refused"),
    ((ResourceLocked,), 405, "resource_locked"),
    ((InequivalentDeclaration, InvalidArgument, InvalidName, ResourceInUse), 400, "bad_request"),
    ((TenancyConflict,), 409, "conflict"),
)
_HTTP_ERRORS = {400: "bad_request", 401: "not_authorised", 403: "access_refused", 404: "Object Not Found",
                405: "method_not_allowed", 409: "conflict", 503: "failed"}


def _error(code: int, reason: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": _HTTP_ERRORS.get(code, "error"), "reason": reason}, status_code=code,
                        headers=headers)


def _created(created: bool) -> Response:
    return Response(status_code=status.HTTP_201_CREATED if created else status.HTTP_204_NO_CONTENT)


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "the body is not JSON") from None


async def _object_body(request: Request) -> dict[str, Any]:
    body = await _json_body(request)
    if not isinstance(body, dict):
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "the body is not a JSON object")
    return body


def _named(items: list[dict], name: str, missing: str) -> dict:
    """The item of a listing with that name, else RabbitMQ's 404."""
    for item in items:
        if item["name"] == name:
            return item
    raise HTTPException(status.HTTP_404_NOT_FOUND, missing)


def _true(value: str | None) -> bool:
    return value is not None and value.lower() == "true"


def rabbitmq_app(state: RabbitState, authenticate):
    """The ASGI app to mount at /api."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    Authenticated = Annotated[Caller, Depends(authenticate)]

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(400, str(exc.errors()))

    @app.exception_handler(CoreError)
    @app.exception_handler(TenancyConflict)
    async def core_error(request: Request, exc: Exception) -> JSONResponse:
        for classes, code, _ in _STATUS:
            if isinstance(exc, classes):
                return _error(code, str(exc))
        return _error(500, str(exc))

    # --- reads ------------------------------------------------------------------------------------

    @app.get("/overview")
    async def overview(caller: Authenticated):
        return await queries.overview(state, caller)

    @app.get("/whoami")
    async def whoami(caller: Authenticated):
        user = await state.context.users.get(caller.user)
        return {"name": caller.user, "tags": list(user.tags) if user else []}

    @app.get("/nodes")
    async def nodes(caller: Authenticated):
        return [queries.node(state)]

    @app.get("/nodes/{name}")
    async def node(name: str, caller: Authenticated):
        found = queries.node(state)
        if segment(name) != found["name"]:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no node {segment(name)}")
        return found

    @app.get("/health/checks/alarms")
    @app.get("/health/checks/local-alarms")
    async def alarms(caller: Authenticated):
        found = queries.alarms(state)
        if found:
            return JSONResponse({"status": "failed", "reason": "resource alarm(s) in effect", "alarms": found},
                                status_code=503)
        return {"status": "ok"}

    @app.get("/aliveness-test/{vhost}")
    async def aliveness(vhost: str, caller: Authenticated):
        await messages.aliveness(state, caller, vhost)
        return {"status": "ok"}

    @app.get("/vhosts")
    async def list_vhosts(caller: Authenticated):
        return await queries.vhosts(state, caller)

    @app.get("/vhosts/{vhost}")
    async def get_vhost(vhost: str, caller: Authenticated):
        return _named(await queries.vhosts(state, caller), segment(vhost), f"vhost {segment(vhost)!r} does not exist")

    @app.get("/vhosts/{vhost}/permissions")
    async def vhost_permissions(vhost: str, caller: Authenticated):
        return await queries.permissions(state, caller, vhost=vhost)

    @app.get("/users")
    async def list_users(caller: Authenticated):
        return await queries.users(state, caller)

    @app.get("/users/{name}")
    async def get_user(name: str, caller: Authenticated):
        return _named(await queries.users(state, caller), segment(name), f"user {segment(name)} does not exist")

    @app.get("/users/{name}/permissions")
    async def user_permissions(name: str, caller: Authenticated):
        return await queries.permissions(state, caller, user_name=segment(name))

    @app.get("/permissions")
    async def list_permissions(caller: Authenticated):
        return await queries.permissions(state, caller)

    @app.get("/permissions/{vhost}/{user}")
    async def get_permission(vhost: str, user: str, caller: Authenticated):
        found = await queries.permissions(state, caller, vhost=vhost, user_name=segment(user))
        if not found:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such permission")
        return found[0]

    @app.get("/exchanges")
    @app.get("/exchanges/{vhost}")
    async def list_exchanges(caller: Authenticated, vhost: str | None = None):
        return await queries.exchanges(state, caller, vhost)

    @app.get("/exchanges/{vhost}/{name}")
    async def get_exchange(vhost: str, name: str, caller: Authenticated):
        return await queries.exchange(state, caller, vhost, segment(name))

    @app.get("/exchanges/{vhost}/{name}/bindings/{direction}")
    async def exchange_bindings(vhost: str, name: str, direction: str, caller: Authenticated):
        side = {"source": "source", "destination": "destination"}.get(direction)
        if side is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "bindings/source or bindings/destination")
        return [b for b in await queries.bindings(state, caller, vhost)
                if b[side] == segment(name) and (side == "source" or b["destination_type"] == "exchange")]

    @app.get("/queues")
    @app.get("/queues/{vhost}")
    async def list_queues(caller: Authenticated, vhost: str | None = None):
        return await queries.queues_of(state, caller, vhost)

    @app.get("/queues/{vhost}/{name}")
    async def get_queue(vhost: str, name: str, caller: Authenticated):
        return await queries.queue(state, caller, vhost, segment(name))

    @app.get("/queues/{vhost}/{name}/bindings")
    async def queue_bindings(vhost: str, name: str, caller: Authenticated):
        return [b for b in await queries.bindings(state, caller, vhost)
                if b["destination_type"] == "queue" and b["destination"] == segment(name)]

    @app.get("/bindings")
    @app.get("/bindings/{vhost}")
    async def list_bindings(caller: Authenticated, vhost: str | None = None):
        return await queries.bindings(state, caller, vhost)

    @app.get("/bindings/{vhost}/e/{source}/{kind}/{destination}")
    async def bindings_between(vhost: str, source: str, kind: str, destination: str, caller: Authenticated):
        return [b for b in await queries.bindings(state, caller, vhost)
                if b["source"] == segment(source) and b["destination"] == segment(destination)
                and b["destination_type"] == ("queue" if kind == "q" else "exchange")]

    @app.get("/consumers")
    @app.get("/consumers/{vhost}")
    async def list_consumers(caller: Authenticated, vhost: str | None = None):
        return await queries.consumers(state, caller, vhost)

    @app.get("/connections")
    async def list_connections(caller: Authenticated):
        return queries.connections(state, caller)

    @app.get("/connections/{name}")
    async def get_connection(name: str, caller: Authenticated):
        return _named(queries.connections(state, caller), segment(name), f"no connection {segment(name)!r}")

    @app.get("/connections/{name}/channels")
    async def connection_channels(name: str, caller: Authenticated):
        return queries.channels(state, caller, segment(name))

    @app.get("/channels")
    async def list_channels(caller: Authenticated):
        return queries.channels(state, caller)

    @app.get("/definitions")
    @app.get("/definitions/{vhost}")
    async def export_definitions(caller: Authenticated, vhost: str | None = None):
        return await definitions.export(state, caller, vhost)

    # --- changes ----------------------------------------------------------------------------------

    @app.put("/vhosts/{vhost}")
    async def put_vhost(vhost: str, caller: Authenticated):
        return _created(await changes.put_vhost(state, caller, vhost))

    @app.delete("/vhosts/{vhost}", status_code=204)
    async def delete_vhost(vhost: str, caller: Authenticated):
        await changes.delete_vhost(state, caller, vhost)

    @app.put("/users/{name}")
    async def put_user(name: str, request: Request, caller: Authenticated):
        return _created(await changes.put_user(state, caller, segment(name), await _object_body(request)))

    @app.delete("/users/{name}", status_code=204)
    async def delete_user(name: str, caller: Authenticated):
        await changes.delete_user(state, caller, segment(name))

    @app.put("/permissions/{vhost}/{user}")
    async def put_permission(vhost: str, user: str, request: Request, caller: Authenticated):
        return _created(await changes.put_permission(state, caller, vhost, segment(user), await _object_body(request)))

    @app.delete("/permissions/{vhost}/{user}", status_code=204)
    async def delete_permission(vhost: str, user: str, caller: Authenticated):
        await changes.delete_permission(state, caller, vhost, segment(user))

    @app.put("/exchanges/{vhost}/{name}")
    async def put_exchange(vhost: str, name: str, request: Request, caller: Authenticated):
        return _created(await changes.put_exchange(state, caller, vhost, segment(name), await _object_body(request)))

    @app.delete("/exchanges/{vhost}/{name}", status_code=204)
    async def delete_exchange(vhost: str, name: str, caller: Authenticated, request: Request):
        await changes.delete_exchange(state, caller, vhost, segment(name),
                                      if_unused=_true(request.query_params.get("if-unused")))

    @app.post("/exchanges/{vhost}/{name}/publish")
    async def publish(vhost: str, name: str, request: Request, caller: Authenticated):
        return {"routed": await messages.publish(state, caller, vhost, segment(name), await _object_body(request))}

    @app.put("/queues/{vhost}/{name}")
    async def put_queue(vhost: str, name: str, request: Request, caller: Authenticated):
        return _created(await changes.put_queue(state, caller, vhost, segment(name), await _object_body(request)))

    @app.delete("/queues/{vhost}/{name}", status_code=204)
    async def delete_queue(vhost: str, name: str, caller: Authenticated, request: Request):
        await changes.delete_queue(state, caller, vhost, segment(name),
                                   if_unused=_true(request.query_params.get("if-unused")),
                                   if_empty=_true(request.query_params.get("if-empty")))

    @app.delete("/queues/{vhost}/{name}/contents", status_code=204)
    async def purge_queue(vhost: str, name: str, caller: Authenticated):
        await changes.purge_queue(state, caller, vhost, segment(name))

    @app.post("/queues/{vhost}/{name}/get")
    async def get_messages(vhost: str, name: str, request: Request, caller: Authenticated):
        return await messages.get(state, caller, vhost, segment(name), await _object_body(request))

    @app.post("/bindings/{vhost}/e/{source}/{kind}/{destination}")
    async def add_binding(vhost: str, source: str, kind: str, destination: str, request: Request,
                          caller: Authenticated):
        key = await changes.add_binding(state, caller, vhost, segment(source), kind, segment(destination),
                                        await _object_body(request))
        return Response(status_code=status.HTTP_201_CREATED, headers={"Location": key})

    @app.delete("/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}", status_code=204)
    async def delete_binding(vhost: str, source: str, kind: str, destination: str, props: str,
                             caller: Authenticated):
        await changes.delete_binding(state, caller, vhost, segment(source), kind, segment(destination),
                                     segment(props))

    @app.delete("/connections/{name}", status_code=204)
    async def close_connection(name: str, caller: Authenticated):
        connection = queries.find_connection(state, caller, segment(name))
        if connection is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no connection {segment(name)!r}")
        state.core.connections.close(connection.id, f"closed by {caller.user} through the management API")

    @app.post("/definitions")
    @app.post("/definitions/{vhost}")
    async def import_definitions(request: Request, caller: Authenticated, vhost: str | None = None):
        skipped = await definitions.import_(state, caller, await _json_body(request), vhost)
        if skipped:
            return JSONResponse({"skipped": skipped})
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    return RawPathSegments(app)

"""The admin app: health and metrics for probes and scrapers, the REST API under /api/v1 (its OpenAPI
document at /api/v1/openapi.json) and the web console under /console.

Errors are answered as {"detail": reason}: 400 for bad input, 401 without valid credentials, 403
for a caller who may not, 404 for what does not exist (or what the caller may not see), 409 for a
conflict such as deleting a namespace that still holds topics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from core.auth import UserStore
from core.errors import (CoreError, InvalidAcl, InvalidArgument, InvalidConfig, InvalidName, InvalidPartitions,
                         ReservedName, UnknownExchange, UnknownQueue, UnknownTenant, UnknownTopic)
from core.tenancy import Tenancy, TenancyConflict
from gateway.admin.security import Authenticator
from gateway.metrics import GatewayMetrics

API_PREFIX = "/api/v1"


@dataclass(frozen=True, slots=True)
class GatewayInfo:
    version: str
    listeners: Mapping[str, str]  # listener name -> "host:port"
    data_dir: Path


@dataclass(frozen=True, slots=True)
class AdminContext:
    """What the API reaches into: the core and the protocols' shared state (None in a bare app)."""

    core: Any
    kafka: Any = None     # protocols.kafka.broker.KafkaBroker: groups, ACLs, quotas
    amqp: Any = None      # protocols.amqp.server.AmqpBroker: queues and exchanges

    @property
    def tenancy(self) -> Tenancy:
        return self.core.tenancy

    @property
    def users(self) -> UserStore:
        return UserStore(self.core.metadata)


_STATUS = (
    ((InvalidName, InvalidConfig, InvalidPartitions, InvalidAcl, InvalidArgument), 400),
    ((UnknownTenant, UnknownTopic, UnknownQueue, UnknownExchange), 404),
    ((ReservedName,), 403),
    ((TenancyConflict,), 409),
)


def create_admin_app(info: GatewayInfo, metrics: GatewayMetrics, context: AdminContext | None = None) -> FastAPI:
    # Interactive docs stay off (no assets from the internet); the OpenAPI document is what scripts read.
    app = FastAPI(title="gateway admin", version=info.version, docs_url=None, redoc_url=None,
                  openapi_url=f"{API_PREFIX}/openapi.json")

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", include_in_schema=False)
    async def prometheus_metrics() -> Response:
        return Response(content=generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get(f"{API_PREFIX}/info", tags=["gateway"])
    async def gateway_info() -> dict[str, object]:
        """Version, listener addresses and data directory (no authentication: for probes)."""
        return {"version": info.version, "listeners": dict(info.listeners), "data_dir": str(info.data_dir)}

    if context is None:
        return app

    @app.exception_handler(CoreError)
    @app.exception_handler(TenancyConflict)
    async def core_error(request: Request, exc: Exception) -> JSONResponse:
        for classes, code in _STATUS:
            if isinstance(exc, classes):
                return JSONResponse({"detail": str(exc)}, status_code=code)
        return JSONResponse({"detail": str(exc)}, status_code=500)

    from gateway.admin import acls, cluster, delayed, messages, resources, roles, tenants, users
    from gateway.console import routes as console

    authenticate = Authenticator(context.users, context.core.audit)
    from gateway.admin import audit
    audit.install(app, context.core.audit, API_PREFIX)   # each change, who made it, before and after
    for module in (tenants, users, resources, messages, delayed, cluster, acls, roles):
        app.include_router(module.router(context, authenticate), prefix=API_PREFIX)
    app.include_router(console.router())
    if context.amqp is not None:
        # RabbitMQ's management API, for its tools (rabbitmqadmin, monitoring agents, definition files)
        from gateway.admin.rabbitmq.app import rabbitmq_app
        from gateway.admin.rabbitmq.queries import RabbitState
        state = RabbitState(context, info.listeners, str(info.data_dir))
        app.mount("/api", rabbitmq_app(state, authenticate))
    return app

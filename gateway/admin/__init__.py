"""The admin port: health, Prometheus metrics, the REST API under /api/v1 and the web console."""

from gateway.admin.api import AdminContext, GatewayInfo, create_admin_app
from gateway.admin.server import AdminServer

__all__ = ["AdminContext", "AdminServer", "GatewayInfo", "create_admin_app"]

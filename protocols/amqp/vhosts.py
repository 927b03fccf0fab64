"""Virtual hosts as tenants and namespaces, and who may log in and open which.

    vhost "/"                   tenant "public", namespace "default" (RabbitMQ's default vhost)
    vhost "<namespace>"         tenant "public", that namespace
    vhost "<tenant>/<namespace>"

Tenant and namespace names follow the core's rule ([A-Za-z0-9._-]); any other vhost does not
exist. A user (the gateway's [[users]]) may open the vhosts it has permissions on: by default the one
of its own tenant/namespace, otherwise those its permissions list (core/auth.py); what it may do
there is checked by protocols/amqp/permissions.py. As in RabbitMQ, the user guest/guest exists by
default, has every permission on "/" only, and may log in only over a loopback connection, unless
[[users]] defines "guest" itself.
"""

from __future__ import annotations

import ipaddress

from core.auth import Principal, User, UserStore
from core.errors import InvalidName
from core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT, check_name

DEFAULT_VHOST = "/"
GUEST = "guest"


def vhost_namespace(vhost: str) -> tuple[str, str] | None:
    """(tenant, namespace) of a vhost, or None if it names none."""
    if vhost == DEFAULT_VHOST:
        return DEFAULT_TENANT, DEFAULT_NAMESPACE
    parts = vhost.split("/")
    if len(parts) == 1:
        tenant, namespace = DEFAULT_TENANT, parts[0]
    elif len(parts) == 2:
        tenant, namespace = parts
    else:
        return None
    try:
        return check_name("tenant", tenant), check_name("namespace", namespace)
    except InvalidName:
        return None


def vhost_name(tenant: str, namespace: str) -> str:
    """The vhost that names tenant/namespace (the inverse of vhost_namespace)."""
    if (tenant, namespace) == (DEFAULT_TENANT, DEFAULT_NAMESPACE):
        return DEFAULT_VHOST
    return namespace if tenant == DEFAULT_TENANT else f"{tenant}/{namespace}"


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


async def authenticate(users: UserStore, username: str, password: str, peer_host: str | None, *,
                       default_guest: bool = True) -> User | None:
    """The user these credentials log in as, or None."""
    user = await users.verify(username, password)
    if user is not None:
        return user
    if default_guest and username == GUEST and password == GUEST and is_loopback(peer_host):
        if await users.get(GUEST) is None:
            return User(Principal(GUEST, DEFAULT_TENANT, DEFAULT_NAMESPACE), {})
    return None

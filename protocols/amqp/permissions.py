"""A connection's configure / write / read permissions on its vhost, checked as RabbitMQ checks them.

RabbitMQ's three permissions are the three actions of the core's grants (core/access.py), one to
one (PERMISSION_ACTIONS). Which method needs which on which resource is METHOD_ACTIONS, RabbitMQ's
access-control table; a check comes before the resource is looked up, so a refused name is refused
whether or not it exists. Passive declares need nothing. The default exchange is named
"amq.default" in checks and refusals. A refusal is 403 ACCESS_REFUSED on the channel: "access to
queue 'q' in vhost '/' refused for user 'u'", and a line in the audit log.

The grants are the user's live ones (core/access.py's UserGrants): a change made through the admin
API applies to the next method of an open connection. basic.publish checks on every message, so a
check compares one version number, then asks a pattern that remembers its answers; ".*" is no check
at all.
"""

from __future__ import annotations

from collections.abc import Callable

from core.access import AccessControl, Action, NamePattern, UserGrants
from core.auth import Permission, Principal
from protocols.amqp.machine.errors import ChannelError
from protocols.amqp.spec import ReplyCode

DEFAULT_EXCHANGE_NAME = "amq.default"

PERMISSION_ACTIONS: dict[str, Action] = {"configure": Action.CONFIGURE, "write": Action.WRITE, "read": Action.READ}

# method -> what it needs: (action, the resource it names). Every client method of the exchange,
# queue and basic classes is listed; () needs nothing.
METHOD_ACTIONS: dict[str, tuple[tuple[Action, str], ...]] = {
    "exchange.declare": ((Action.CONFIGURE, "exchange"),),    # with alternate-exchange also read:
                                                                # the exchange, write: the alternate
    "exchange.delete": ((Action.CONFIGURE, "exchange"),),
    "exchange.bind": ((Action.WRITE, "destination exchange"), (Action.READ, "source exchange")),
    "exchange.unbind": ((Action.WRITE, "destination exchange"), (Action.READ, "source exchange")),
    "queue.declare": ((Action.CONFIGURE, "queue"),),          # a server-named one too: "amq.gen-..."
    "queue.delete": ((Action.CONFIGURE, "queue"),),
    "queue.bind": ((Action.WRITE, "queue"), (Action.READ, "exchange")),
    "queue.unbind": ((Action.WRITE, "queue"), (Action.READ, "exchange")),
    "queue.purge": ((Action.READ, "queue"),),
    "basic.get": ((Action.READ, "queue"),),
    "basic.consume": ((Action.READ, "queue"),),
    "basic.publish": ((Action.WRITE, "exchange"),),
    "basic.qos": (),
    "basic.cancel": (),
    "basic.ack": (),
    "basic.reject": (),
    "basic.nack": (),
    "basic.recover": (),
    "basic.recover-async": (),
}

Refused = Callable[[str, str, Action], None]
"""Told of each refusal: (resource kind, name, action)."""


class ResourceAccess:
    """One connection's permission on the vhost it opened."""

    __slots__ = ("vhost", "user", "_grants", "_where", "_version", "_configure", "_write", "_read", "_on_refused")

    def __init__(self, grants: UserGrants, tenant: str, namespace: str, vhost: str, user: str,
                 on_refused: Refused | None = None) -> None:
        self.vhost = vhost
        self.user = user
        self._grants = grants
        self._where = (tenant, namespace)
        self._version = -1
        self._on_refused = on_refused
        self._configure = self._write = self._read = None
        self._current()

    @classmethod
    def fixed(cls, permission: Permission, vhost: str, user: str) -> "ResourceAccess":
        """Access by one permission that never changes (the built-in guest; tests)."""
        grants = AccessControl.fixed(Principal(user, permission.tenant, permission.namespace), (permission,))
        return cls(grants, permission.tenant, permission.namespace, vhost, user)

    def _current(self) -> None:
        """Take the grant as it is now, if it changed: each pattern, None for ".*" (no check)."""
        if self._grants.version == self._version:
            return
        self._version = self._grants.version
        grant = self._grants.on(*self._where)
        patterns = [None if grant is None else grant.pattern(action) for action in Action]
        self._configure, self._write, self._read = (
            _NOTHING if pattern is None else None if pattern.everything else pattern for pattern in patterns)

    def configure_queue(self, name: str) -> None:
        self._current()
        if self._configure is not None and not self._configure.allows(name):
            raise self._refused("queue", name, Action.CONFIGURE)

    def configure_exchange(self, name: str) -> None:
        self._current()
        name = name or DEFAULT_EXCHANGE_NAME
        if self._configure is not None and not self._configure.allows(name):
            raise self._refused("exchange", name, Action.CONFIGURE)

    def write_queue(self, name: str) -> None:
        self._current()
        if self._write is not None and not self._write.allows(name):
            raise self._refused("queue", name, Action.WRITE)

    def write_exchange(self, name: str) -> None:
        if self._grants.version != self._version:
            self._current()
        if self._write is not None:
            name = name or DEFAULT_EXCHANGE_NAME
            if not self._write.allows(name):
                raise self._refused("exchange", name, Action.WRITE)

    def read_queue(self, name: str) -> None:
        self._current()
        if self._read is not None and not self._read.allows(name):
            raise self._refused("queue", name, Action.READ)

    def read_exchange(self, name: str) -> None:
        self._current()
        name = name or DEFAULT_EXCHANGE_NAME
        if self._read is not None and not self._read.allows(name):
            raise self._refused("exchange", name, Action.READ)

    def _refused(self, kind: str, name: str, action: Action) -> ChannelError:
        if self._on_refused is not None:
            self._on_refused(kind, name, action)
        return ChannelError(ReplyCode.ACCESS_REFUSED,
                            f"access to {kind} '{name}' in vhost '{self.vhost}' refused for user '{self.user}'")


_NOTHING = NamePattern("")   # no grant on the vhost any more: every name is refused

"""One authorization model for every protocol: grants, and the decision that weighs them with ACLs.

A grant says what a user may do in one tenant/namespace (or in every namespace of a tenant: namespace
"*", which a grant on the namespace itself overrides), as three regular expressions over resource
names, one per action:

    configure   create, delete and change resources     (RabbitMQ configure; Pulsar functions/manage)
    write       put messages into them                  (RabbitMQ write; Pulsar produce)
    read        take messages out of them, and follow   (RabbitMQ read; Pulsar consume)
                a subscription

A resource name is whatever a protocol names: a topic, a subscription (a Kafka group, an AMQP queue),
an exchange, a producer identity. A pattern is a search ("" grants nothing, ".*" everything). Which
protocol operation needs which action is one table per protocol, in protocols/ (Kafka:
protocols/kafka/authorization.py; AMQP: protocols/amqp/permissions.py); core/ never sees their words.

Grants are stored with the user (/users/<name>, "permissions": core/auth.py), so a user and what it
may do come and go together, and with the roles it has (/roles/<name>, core/roles.py): in each
namespace a user may do what its own grant or any of its roles' grants allows (their patterns are
joined into one). A user stored without a permissions list has the *default grant*: everything in
its own namespace. ACL bindings (core/acl.py) are the model's second kind of entry: per tenant, per
resource type, with hosts and DENY. A decision (`authorize`) takes both: a matching DENY binding
refuses; else a matching ALLOW binding or a grant of one of the actions the operation accepts allows.

Nothing here is on a per-message path: a user's grants are read once, kept (`UserGrants`) and
updated in place when the user's node changes (a watch, so a change made by any process applies to
open connections at once; a role's node is watched as well); each pattern remembers its answers per name, and its owner compares one
version number to notice a change.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import re
from collections.abc import Callable, Iterable

from core.acl import AclDecision, Authorizer, Operation, ResourceType
from core.auth import ANY_NAMESPACE, EVERYTHING, Permission, Principal, User, UserStore
from core.roles import ROLES_ROOT, RoleStore
from storage.api import MetadataStore

log = logging.getLogger("gateway.core.access")

_REMEMBERED = 256     # answers a pattern keeps (a connection names the same few resources over and over)
NOTHING = ("", "^$")  # patterns that match no name


class Action(enum.Enum):
    CONFIGURE = "configure"
    WRITE = "write"
    READ = "read"


class NamePattern:
    """A grant's regular expression over names, remembering its recent answers."""

    __slots__ = ("text", "_search", "_answers")

    def __init__(self, text: str) -> None:
        self.text = text
        try:
            self._search = re.compile(text or "^$").search
        except re.error:     # validated before it is stored; an unreadable one grants nothing
            self._search = lambda name: None
        self._answers: dict[str, bool] = {}

    def allows(self, name: str) -> bool:
        answer = self._answers.get(name)
        if answer is None:
            if len(self._answers) >= _REMEMBERED:
                self._answers.clear()
            answer = self._answers[name] = self._search(name) is not None
        return answer

    @property
    def everything(self) -> bool:
        return self.text == EVERYTHING

    @property
    def nothing(self) -> bool:
        return self.text in NOTHING


class NamespaceGrant:
    """One grant, compiled: the pattern of each action in one tenant/namespace."""

    __slots__ = ("permission", "_patterns")

    def __init__(self, permission: Permission) -> None:
        self.permission = permission
        self._patterns = {action: NamePattern(getattr(permission, action.value)) for action in Action}

    def allows(self, action: Action, name: str) -> bool:
        return self._patterns[action].allows(name)

    def pattern(self, action: Action) -> NamePattern:
        return self._patterns[action]


class UserGrants:
    """A user's grants as they are now; the same object is updated when they change (`version` grows)."""

    __slots__ = ("user", "version", "_explicit", "_default")

    def __init__(self, user: str) -> None:
        self.user = user
        self.version = 0
        self._explicit: dict[tuple[str, str], NamespaceGrant] = {}
        self._default: NamespaceGrant | None = None

    def set(self, stored: User | None, from_roles: Iterable[Permission] = ()) -> None:
        """Take the user as stored now (None: gone, so nothing is granted) and its roles' permissions."""
        listed: dict[tuple[str, str], list[Permission]] = {}
        default = None
        if stored is not None:
            for permission in (*(stored.permissions or ()), *from_roles):
                listed.setdefault((permission.tenant, permission.namespace), []).append(permission)
            if stored.permissions is None:
                own = stored.principal
                default = NamespaceGrant(Permission(own.tenant, own.namespace))
        self._explicit = {key: NamespaceGrant(_joined(permissions)) for key, permissions in listed.items()}
        self._default = default
        self.version += 1

    def on(self, tenant: str, namespace: str, *, with_default: bool = True) -> NamespaceGrant | None:
        """The grant in tenant/namespace, None without one. `with_default`: whether a user stored
        without grants has its default grant (AMQP) or nothing (Kafka, whose ACLs came first)."""
        grant = self._explicit.get((tenant, namespace)) or self._explicit.get((tenant, ANY_NAMESPACE))
        if grant is None and with_default and self._default is not None:
            own = self._default.permission
            if (own.tenant, own.namespace) == (tenant, namespace):
                return self._default
        return grant


def _joined(permissions: list[Permission]) -> Permission:
    """One permission allowing what any of them allows."""
    if len(permissions) == 1:
        return permissions[0]

    def join(patterns: list[str]) -> str:
        live = [pattern for pattern in patterns if pattern not in NOTHING]
        if EVERYTHING in live:
            return EVERYTHING
        return "|".join(f"(?:{pattern})" for pattern in dict.fromkeys(live)) if len(live) > 1 else "".join(live)

    first = permissions[0]
    return Permission(first.tenant, first.namespace,
                      *(join([getattr(p, action.value) for p in permissions]) for action in Action))


class AccessControl:
    """The grants of the users this process serves, kept current. One per process, on the core."""

    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata
        self._users = UserStore(metadata)
        self._roles = RoleStore(metadata)
        self._grants: dict[str, UserGrants] = {}
        self._roles_of: dict[str, tuple[str, ...]] = {}   # each cached user's roles
        self._watches: dict[str, Callable[[], None]] = {}
        self._loading: dict[str, asyncio.Future[UserGrants]] = {}
        self._reloads: set[asyncio.Task] = set()

    async def grants(self, user: str) -> UserGrants:
        """The user's grants; read from the store the first time, then watched."""
        known = self._grants.get(user)
        if known is not None:
            return known
        loading = self._loading.get(user)
        if loading is not None:
            return await asyncio.shield(loading)
        future = self._loading[user] = asyncio.get_running_loop().create_future()
        try:
            grants = UserGrants(user)
            path = f"/users/{user}"
            if path not in self._watches:   # before the read: a change after it is never missed
                self._watches[path] = self._metadata.watch(path, self._changed)
            await self._load(grants)
            self._grants[user] = grants
            future.set_result(grants)
            return grants
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()   # retrieved: a waiter may be gone
            raise
        finally:
            del self._loading[user]

    @staticmethod
    def fixed(principal: Principal, permissions: Iterable[Permission]) -> UserGrants:
        """Grants of a user the store does not hold (AMQP's built-in loopback guest)."""
        grants = UserGrants(principal.user)
        grants.set(User(principal, {}, tuple(permissions)))
        return grants

    async def refresh(self, user: str) -> None:
        """Reread a user's grants now (after this process changed them: no wait for the watch)."""
        loading = self._loading.get(user)
        if loading is not None:   # a first read under way may have read what is stale now
            with contextlib.suppress(Exception):
                await asyncio.shield(loading)
        grants = self._grants.get(user)
        if grants is not None:
            await self._load(grants)

    async def refresh_role(self, role: str) -> None:
        """Reread the grants of every cached user that has the role."""
        for user in [user for user, roles in self._roles_of.items() if role in roles]:
            await self.refresh(user)

    async def _load(self, grants: UserGrants) -> None:
        stored = await self._users.get(grants.user)
        roles = stored.roles if stored is not None else ()
        from_roles: list[Permission] = []
        for role in roles:
            from_roles += await self._roles.get(role) or ()
            path = f"{ROLES_ROOT}/{role}"
            if path not in self._watches:
                self._watches[path] = self._metadata.watch(path, self._role_changed)
        self._roles_of[grants.user] = roles
        grants.set(stored, from_roles)

    def _role_changed(self, path: str) -> None:
        self._reread_later(self.refresh_role, "role", path)

    def _reread_later(self, refresh, kind: str, path: str) -> None:
        """A watched node changed: reread the grants it names in the background."""
        task = asyncio.get_running_loop().create_task(self._reread(refresh, kind, path.rsplit("/", 1)[-1]))
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    async def _reread(self, refresh, kind: str, name: str) -> None:
        try:
            await refresh(name)
        except Exception as exc:   # the store is unreachable: the next change fires again
            log.warning("rereading the grants of %s %s failed: %s", kind, name, exc)

    def close(self) -> None:
        for cancel in self._watches.values():
            cancel()
        self._watches.clear()

    def _changed(self, path: str) -> None:
        self._reread_later(self.refresh, "user", path)

    async def namespace_grants(self, tenant: str, namespace: str) -> list[tuple[str, Permission]]:
        """Every user's written grant in tenant/namespace (default grants are not listed), by user
        name. Reads every user: for listings, not decisions."""
        found = []
        for name in await self._users.names():
            user = await self._users.get(name)
            if user is None:
                continue
            permissions = list(user.permissions or ())
            for role in user.roles:
                permissions += await self._roles.get(role) or ()
            specific = any((p.tenant, p.namespace) == (tenant, namespace) for p in permissions)
            found += [(name, p) for p in permissions if p.tenant == tenant
                      and (p.namespace == namespace or p.namespace == ANY_NAMESPACE and not specific)]
        return found

    # --- decisions ----------------------------------------------------------------------------

    async def authorize(self, acls: Authorizer, principal: Principal, host: str | None, operation: Operation,
                        resource_type: ResourceType, name: str, granted_by: frozenset[Action]) -> bool:
        """Whether the principal may do `operation` on the named resource of its own namespace:
        ACL bindings first (a DENY refuses, an ALLOW allows), then a grant of any of `granted_by`."""
        decision = await acls.decide(principal, host, operation, resource_type, name)
        if decision is AclDecision.ALLOWED:
            return True
        if decision is AclDecision.DENIED:
            return False
        if granted_by:
            grant = (await self.grants(principal.user)).on(principal.tenant, principal.namespace, with_default=False)
            if grant is not None and any(grant.allows(action, name) for action in granted_by):
                return True
        return decision is AclDecision.NO_ACL and acls.allow_everyone_if_no_acl_found

    async def grants_some(self, principal: Principal, granted_by: frozenset[Action]) -> bool:
        """Whether a grant of the principal's namespace allows one of the actions on some name."""
        grant = (await self.grants(principal.user)).on(principal.tenant, principal.namespace, with_default=False)
        return grant is not None and any(not grant.pattern(action).nothing for action in granted_by)

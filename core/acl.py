"""Access control lists: who may do what to which resource, and the authorizer that decides.

The model is Kafka's (KIP-140 ACLs, KIP-290 prefixed patterns), in protocol-neutral names; the
Kafka layer maps the numeric codes (protocols/kafka/acl_wire.py).

A binding is a resource pattern plus an access control entry:

    (resource type, resource name, pattern type LITERAL | PREFIXED)
    (principal "User:alice" or "User:*", host "*" or an address, operation, permission ALLOW | DENY)

A LITERAL pattern named "*" matches every resource of its type; a PREFIXED pattern matches every
name that starts with it. Resource names are the names clients use (a topic's name within its
namespace), so one ACL covers that name in every namespace of its tenant.

Storage: one metadata node per binding, /acls/<tenant>/<id> holding the binding as JSON (enum
names, not codes), ids from the "acl" counter. ACLs are a set per tenant, as Kafka's are per
resource: creating a binding that exists already succeeds and stores nothing.

Decisions (Kafka's AclAuthorizer.authorizeAction, for a literal resource name):
  - a super user (by principal string, e.g. "User:admin") is always allowed;
  - the ACLs that apply are those on the literal name, on the literal "*" of the type, and on every
    prefix of the name; with none at all the answer is `allow_everyone_if_no_acl_found` (False);
  - a matching DENY wins; DENY matches only its own operation or ALL (no implication);
  - otherwise a matching ALLOW is needed; ALLOW of READ, WRITE, DELETE or ALTER implies DESCRIBE,
    ALLOW of ALTER_CONFIGS implies DESCRIBE_CONFIGS, ALLOW of ALL implies everything;
  - an entry matches its principal or "User:*", its host or "*". An unknown client host (None)
    matches only "*" for ALLOW entries but every host for DENY entries: never more access.

Cache: each tenant's bindings are read once and kept in memory, indexed for the decision above.
A create or delete made here updates the cache with exactly what was written; a failed write
drops the tenant's cache so the next decision rereads the store. Other processes (the brokers of a
cluster) learn of a change through /acl-changes/<tenant>, which every mutation rewrites and every
process that cached the tenant watches: the watch drops the cache, so their next decision rereads
the store (a read that the change overtook is not kept). Mutations (and loads) of a tenant are
serialised by a lock; decisions on a cached tenant never wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass

from core.auth import Principal
from core.errors import CoreError, InvalidAcl
from core.names import check_name
from storage.api import MetadataStore, NoNode, StorageError

log = logging.getLogger("gateway.core")

ACL_ROOT = "/acls"
CHANGES_ROOT = "/acl-changes"     # /acl-changes/<tenant>: rewritten by each mutation, watched by each cache
ACL_COUNTER = "acl"
WILDCARD = "*"                    # a literal resource name matching every resource; also any host
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"    # the one name of the CLUSTER resource (Kafka's)


class ResourceType(enum.Enum):
    UNKNOWN = "UNKNOWN"   # a value this gateway does not know; never stored, never matched
    ANY = "ANY"           # filters only
    TOPIC = "TOPIC"
    GROUP = "GROUP"
    CLUSTER = "CLUSTER"
    TRANSACTIONAL_ID = "TRANSACTIONAL_ID"
    DELEGATION_TOKEN = "DELEGATION_TOKEN"


class PatternType(enum.Enum):
    UNKNOWN = "UNKNOWN"
    ANY = "ANY"           # filters only: any pattern type, exact name
    MATCH = "MATCH"       # filters only: every pattern that would match the name
    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"


class Operation(enum.Enum):
    UNKNOWN = "UNKNOWN"
    ANY = "ANY"           # filters only
    ALL = "ALL"
    READ = "READ"
    WRITE = "WRITE"
    CREATE = "CREATE"
    DELETE = "DELETE"
    ALTER = "ALTER"
    DESCRIBE = "DESCRIBE"
    CLUSTER_ACTION = "CLUSTER_ACTION"
    DESCRIBE_CONFIGS = "DESCRIBE_CONFIGS"
    ALTER_CONFIGS = "ALTER_CONFIGS"
    IDEMPOTENT_WRITE = "IDEMPOTENT_WRITE"


class AclDecision(enum.Enum):
    ALLOWED = "ALLOWED"           # a super user, or an ALLOW binding matched (and no DENY)
    DENIED = "DENIED"             # a DENY binding matched
    NOT_ALLOWED = "NOT_ALLOWED"   # bindings apply to the resource, none allows
    NO_ACL = "NO_ACL"             # no binding applies to the resource at all


class Permission(enum.Enum):
    UNKNOWN = "UNKNOWN"
    ANY = "ANY"           # filters only
    DENY = "DENY"
    ALLOW = "ALLOW"


# The operations whose ALLOW also grants the key (an ALLOW of ALL grants everything).
_IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE,
                                   Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


# --- values ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: Operation
    permission: Permission


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    @classmethod
    def of(cls, resource_type: ResourceType, name: str, pattern_type: PatternType, principal: str, host: str,
           operation: Operation, permission: Permission) -> "AclBinding":
        return cls(ResourcePattern(resource_type, name, pattern_type),
                   AccessControlEntry(principal, host, operation, permission))

    def to_doc(self) -> dict:
        p, e = self.pattern, self.entry
        return {"resource_type": p.resource_type.value, "name": p.name, "pattern_type": p.pattern_type.value,
                "principal": e.principal, "host": e.host, "operation": e.operation.value,
                "permission": e.permission.value}

    @classmethod
    def from_doc(cls, doc: dict) -> "AclBinding":
        return cls.of(ResourceType(doc["resource_type"]), doc["name"], PatternType(doc["pattern_type"]),
                      doc["principal"], doc["host"], Operation(doc["operation"]), Permission(doc["permission"]))


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Kafka's ResourcePatternFilter: a None name matches any name."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type is not pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type is PatternType.ANY or self.pattern_type is pattern.pattern_type:
            return self.name == pattern.name
        # MATCH: every stored pattern that would apply to this name.
        if pattern.pattern_type is PatternType.LITERAL:
            return pattern.name in (self.name, WILDCARD)
        return pattern.pattern_type is PatternType.PREFIXED and self.name.startswith(pattern.name)


@dataclass(frozen=True, slots=True)
class EntryFilter:
    """Kafka's AccessControlEntryFilter: None principal/host match any; exact strings otherwise."""

    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation is Operation.ANY or self.operation is entry.operation)
                and (self.permission is Permission.ANY or self.permission is entry.permission))


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: EntryFilter = EntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)


ANY_ACL = AclBindingFilter()


@dataclass(frozen=True, slots=True)
class AclDeletion:
    """One binding a delete filter matched, and why it could not be deleted (None: it was)."""

    binding: AclBinding
    error: CoreError | None = None


def check_binding(binding: AclBinding) -> None:
    """What Kafka's authorizer refuses to store (InvalidAcl); ANY/MATCH values are refused too."""
    p, e = binding.pattern, binding.entry
    if (p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY)
            or p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED)
            or e.operation in (Operation.UNKNOWN, Operation.ANY)
            or e.permission in (Permission.UNKNOWN, Permission.ANY)):
        raise InvalidAcl("Failed to create ACL")       # Kafka's message (the cause is not sent)
    if "/" in p.name:
        raise InvalidAcl("Failed to create ACL")


def principal_string(principal: Principal) -> str:
    return f"User:{principal.user}"


def _valid_principal(principal: str) -> bool:
    # Kafka parses "Type:name" (split once); only an empty string or a missing ":" fails.
    return ":" in principal


# --- the per-tenant cache -------------------------------------------------------------------------


class _TenantAcls:
    """One tenant's bindings (id -> binding) and the indexes a decision reads."""

    def __init__(self, stored: dict[int, AclBinding]) -> None:
        self.stored = stored
        self.literal: dict[tuple[ResourceType, str], list[AccessControlEntry]] = defaultdict(list)
        self.prefixed: dict[tuple[ResourceType, str], list[AccessControlEntry]] = defaultdict(list)
        for binding in stored.values():
            p = binding.pattern
            index = self.literal if p.pattern_type is PatternType.LITERAL else self.prefixed
            index[p.resource_type, p.name].append(binding.entry)

    def applicable(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        entries = list(self.literal.get((resource_type, WILDCARD), ()))
        if name != WILDCARD:
            entries += self.literal.get((resource_type, name), ())
        if self.prefixed:
            for length in range(1, len(name) + 1):
                entries += self.prefixed.get((resource_type, name[:length]), ())
        return entries


# --- the authorizer -------------------------------------------------------------------------------


class Authorizer:
    """Stores ACLs per tenant and decides requests against them. One per process."""

    def __init__(self, metadata: MetadataStore, *, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self._metadata = metadata
        self.super_users = frozenset(user.strip() for user in super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._cache: dict[str, _TenantAcls] = {}
        self._locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._changes: dict[str, int] = defaultdict(int)     # per tenant: changes seen through the watch
        self._watches: dict[str, Callable[[], None]] = {}

    # --- decisions ----------------------------------------------------------------------------

    async def authorize(self, principal: Principal, host: str | None, operation: Operation,
                        resource_type: ResourceType, name: str) -> bool:
        decision = await self.decide(principal, host, operation, resource_type, name)
        if decision is AclDecision.NO_ACL:
            return self.allow_everyone_if_no_acl_found
        return decision is AclDecision.ALLOWED

    async def decide(self, principal: Principal, host: str | None, operation: Operation,
                     resource_type: ResourceType, name: str) -> "AclDecision":
        """What the bindings alone say (core/access.py weighs grants in where they say nothing)."""
        if operation in (Operation.ANY, Operation.UNKNOWN) or resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise ValueError(f"cannot authorize {operation.name} on {resource_type.name}")
        who = principal_string(principal)
        if who in self.super_users:
            return AclDecision.ALLOWED
        entries = (await self._acls(principal.tenant)).applicable(resource_type, name)
        if not entries:
            return AclDecision.NO_ACL
        principals = (who, WILDCARD_PRINCIPAL)
        for entry in entries:
            if (entry.permission is Permission.DENY and entry.principal in principals
                    and entry.operation in (operation, Operation.ALL)
                    and (host is None or entry.host in (host, WILDCARD))):
                return AclDecision.DENIED
        granting = _IMPLIED_BY.get(operation, frozenset({operation}))
        if any(entry.permission is Permission.ALLOW and entry.principal in principals
               and (entry.operation is Operation.ALL or entry.operation in granting)
               and entry.host in (host, WILDCARD)
               for entry in entries):
            return AclDecision.ALLOWED
        return AclDecision.NOT_ALLOWED

    # --- administration -----------------------------------------------------------------------

    async def acls(self, tenant: str, acl_filter: AclBindingFilter = ANY_ACL) -> list[AclBinding]:
        """The tenant's bindings the filter matches, in creation order."""
        stored = (await self._acls(tenant)).stored
        return [binding for _, binding in sorted(stored.items()) if acl_filter.matches(binding)]

    async def create_acls(self, tenant: str, bindings: Sequence[AclBinding]) -> list[CoreError | None]:
        """Store each binding; one result per binding, None when it is stored (or already was).

        As Kafka's authorizer does, bindings are written per resource pattern: when one binding
        of a pattern has a malformed principal, or the write fails, every binding of that pattern
        in this call gets the error.
        """
        results: list[CoreError | None] = [None] * len(bindings)
        groups: dict[ResourcePattern, list[int]] = defaultdict(list)
        for index, binding in enumerate(bindings):
            try:
                check_binding(binding)
            except InvalidAcl as exc:
                results[index] = exc
                continue
            groups[binding.pattern].append(index)
        if groups:
            async with self._update(tenant) as update:
                for indexes in groups.values():
                    error = await update.create([bindings[i] for i in indexes])
                    for index in indexes:
                        results[index] = error
        return results

    async def delete_acls(self, tenant: str, filters: Sequence[AclBindingFilter]) -> list[list[AclDeletion]]:
        """Delete what each filter matches; a binding several filters match is reported under the
        first of them only (as Kafka does)."""
        results: list[list[AclDeletion]] = [[] for _ in filters]
        if filters:
            async with self._update(tenant) as update:
                for acl_id, binding in sorted(update.before.items()):
                    first = next((i for i, f in enumerate(filters) if f.matches(binding)), None)
                    if first is not None:
                        results[first].append(AclDeletion(binding, await update.delete(acl_id)))
        return results

    # --- cache and storage --------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _update(self, tenant: str) -> AsyncIterator["_Update"]:
        """A tenant's mutation, under its lock. Afterwards the cache holds what was certainly
        written; if a write failed or was interrupted (its outcome unknown) the cache is dropped
        so the next reader rereads the store."""
        async with self._locks[tenant]:
            update = _Update(self._metadata, tenant, (await self._load_locked(tenant)).stored)
            try:
                yield update
            except BaseException:
                self._cache.pop(tenant, None)
                raise
            if update.failed:
                self._cache.pop(tenant, None)
            else:
                self._cache[tenant] = _TenantAcls(update.stored)
            if update.changed:   # for the other processes' caches
                with contextlib.suppress(StorageError):
                    await self._metadata.put(f"{CHANGES_ROOT}/{tenant}", b"{}")

    async def _acls(self, tenant: str) -> _TenantAcls:
        cached = self._cache.get(tenant)
        if cached is not None:
            return cached    # the common case: no await, no lock
        async with self._locks[tenant]:
            return await self._load_locked(tenant)

    async def _load_locked(self, tenant: str) -> _TenantAcls:
        cached = self._cache.get(tenant)
        if cached is not None:
            return cached
        check_name("tenant", tenant)
        if tenant not in self._watches:
            self._watches[tenant] = self._metadata.watch(f"{CHANGES_ROOT}/{tenant}", self._changed)
        seen = self._changes[tenant]
        folder = f"{ACL_ROOT}/{tenant}"
        ids = [int(child) for child in await self._metadata.children(folder) if child.isdigit()]
        nodes = await asyncio.gather(*(self._metadata.get(f"{folder}/{acl_id}") for acl_id in ids))
        stored = {acl_id: AclBinding.from_doc(json.loads(node.value))
                  for acl_id, node in zip(ids, nodes) if node is not None}
        acls = _TenantAcls(stored)
        if self._changes[tenant] == seen:   # else a change came meanwhile: answer, but do not keep
            self._cache[tenant] = acls
        return acls

    def _changed(self, path: str) -> None:
        tenant = path.rsplit("/", 1)[-1]
        self._changes[tenant] += 1
        self._cache.pop(tenant, None)

    def close(self) -> None:
        for cancel in self._watches.values():
            cancel()
        self._watches.clear()


class _Update:
    """The writes of one mutation of a tenant's ACLs, and what they leave stored."""

    def __init__(self, metadata: MetadataStore, tenant: str, before: dict[int, AclBinding]) -> None:
        self._metadata = metadata
        self._tenant = tenant
        self.before = before
        self.stored = dict(before)
        self._existing = set(before.values())
        self.failed = False
        self.changed = False    # something was written (or may have been)

    async def create(self, group: list[AclBinding]) -> CoreError | None:
        bad = next((b.entry.principal for b in group if not _valid_principal(b.entry.principal)), None)
        if bad is not None:
            return CoreError(f"expected a string in format principalType:principalName but got {bad!r}")
        try:
            for binding in group:
                if binding in self._existing:
                    continue   # a set: the same binding twice is stored once
                acl_id = await self._metadata.next_id(ACL_COUNTER)
                self.changed = True
                doc = json.dumps(binding.to_doc()).encode()
                await self._metadata.create(f"{ACL_ROOT}/{self._tenant}/{acl_id}", doc)
                self.stored[acl_id] = binding
                self._existing.add(binding)
        except StorageError as exc:
            log.error("storing ACLs of tenant %s failed: %s", self._tenant, exc)
            self.failed = True
            return CoreError(f"storing the ACL failed: {exc}")
        return None

    async def delete(self, acl_id: int) -> CoreError | None:
        self.changed = True
        try:
            await self._metadata.delete(f"{ACL_ROOT}/{self._tenant}/{acl_id}")
        except NoNode:
            pass  # gone already: deleted is deleted
        except StorageError as exc:
            log.error("deleting ACL %s of tenant %s failed: %s", acl_id, self._tenant, exc)
            self.failed = True
            return CoreError(f"deleting the ACL failed: {exc}")
        del self.stored[acl_id]
        return None

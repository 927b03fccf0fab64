"""Authorization for Kafka handlers: one call per check, as Kafka's KafkaApis makes them.

Enforcement follows authentication. With SASL off (the listener has no `sasl_mechanisms`) every
connection is anonymous and everything is allowed: ACLs can still be created, described and
deleted, and are kept, but nothing consults them. With SASL on, or on a TLS listener whose client
certificates are the logins (protocols/kafka/certificate_login.py), every check asks the one
authorization model (core/access.py) for the connection's principal: its ACL bindings (core/acl.py)
first, then its grant in its own namespace, through GRANTED_BY below. A connection without a
principal is refused (the connection machine lets no such connection past SaslHandshake/
SaslAuthenticate anyway). A refusal is written to the audit log (core/audit.py), except where a
check only asks (a listing that hides what is refused, or the first of two alternatives).

    if not await check(ctx, Operation.WRITE, ResourceType.TOPIC, topic.name):
        ...TOPIC_AUTHORIZATION_FAILED for this topic's partitions...

Resource names are the names the client sent (a topic name within the client's namespace);
the CLUSTER resource is named CLUSTER_NAME ("kafka-cluster").

Besides single decisions: `authorized_operations` (the bit field of allowed operations that
Metadata, DescribeCluster and DescribeGroups report) and `authorized_by_resource_type` (KIP-679:
may the principal do an operation on some resource of a type, as InitProducerId asks).
"""

from __future__ import annotations

from collections.abc import Iterable

from core.access import Action
from core.acl import (CLUSTER_NAME, WILDCARD, WILDCARD_PRINCIPAL, Operation, PatternType, Permission, ResourceType,
                      principal_string)
from protocols.kafka import acl_wire
from protocols.kafka.broker import RequestContext

__all__ = ["CLUSTER_NAME", "Operation", "ResourceType", "check", "check_cluster", "authorized_names", "enforced",
           "authorized_operations", "authorized_by_resource_type", "GRANTED_BY"]

# Kafka's AclEntry.supportedOperations: the operations an authorized-operations field can report.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
                         Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
}


_NONE: frozenset[Action] = frozenset()
_ANY = frozenset(Action)

# Which actions of a grant (core/access.py) allow each Kafka operation, on the resource's name in the
# principal's namespace (a grant's patterns match topic names, group ids and transactional ids alike).
# A grant never gives an operation on the cluster: those stay with super users and ACLs (an
# idempotent producer needs none: Kafka 2.8 lets WRITE on some topic stand for IDEMPOTENT_WRITE).
GRANTED_BY: dict[tuple[ResourceType, Operation], frozenset[Action]] = {
    (ResourceType.TOPIC, Operation.READ): frozenset({Action.READ}),
    (ResourceType.TOPIC, Operation.WRITE): frozenset({Action.WRITE}),
    (ResourceType.TOPIC, Operation.CREATE): frozenset({Action.CONFIGURE}),
    (ResourceType.TOPIC, Operation.DELETE): frozenset({Action.CONFIGURE}),
    (ResourceType.TOPIC, Operation.ALTER): frozenset({Action.CONFIGURE}),
    (ResourceType.TOPIC, Operation.DESCRIBE): _ANY,
    (ResourceType.TOPIC, Operation.DESCRIBE_CONFIGS): _ANY,
    (ResourceType.TOPIC, Operation.ALTER_CONFIGS): frozenset({Action.CONFIGURE}),
    (ResourceType.GROUP, Operation.READ): frozenset({Action.READ}),
    (ResourceType.GROUP, Operation.DESCRIBE): frozenset({Action.READ, Action.CONFIGURE}),
    (ResourceType.GROUP, Operation.DELETE): frozenset({Action.CONFIGURE}),
    (ResourceType.TRANSACTIONAL_ID, Operation.WRITE): frozenset({Action.WRITE}),
    (ResourceType.TRANSACTIONAL_ID, Operation.DESCRIBE): frozenset({Action.WRITE}),
    **{(ResourceType.CLUSTER, operation): _NONE for operation in SUPPORTED_OPERATIONS[ResourceType.CLUSTER]},
    (ResourceType.DELEGATION_TOKEN, Operation.DESCRIBE): _NONE,
}


def enforced(ctx: RequestContext) -> bool:
    """Whether this connection's requests are subject to ACLs at all."""
    return bool(ctx.broker.settings.sasl_mechanisms) or ctx.session.certificate_login


async def check(ctx: RequestContext, operation: Operation, resource_type: ResourceType, name: str, *,
                audit: bool = True) -> bool:
    """Whether the connection may; `audit`: write a refusal to the audit log."""
    if not enforced(ctx):
        return True
    principal = ctx.session.principal
    if principal is None:
        return False
    core = ctx.broker.core
    allowed = await core.access.authorize(ctx.broker.authorizer, principal, ctx.session.client_host, operation,
                                          resource_type, name, GRANTED_BY.get((resource_type, operation), _NONE))
    if not allowed and audit:
        client = ctx.session.client
        core.audit.refused("authorization", "kafka", principal.user,
                           f"{resource_type.value.lower()} {principal.tenant}/{principal.namespace}/{name}",
                           operation.value, client.address if client is not None else None)
    return allowed


async def check_cluster(ctx: RequestContext, operation: Operation, *, audit: bool = True) -> bool:
    return await check(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME, audit=audit)


async def authorized_names(ctx: RequestContext, operation: Operation, resource_type: ResourceType,
                           names: Iterable[str]) -> set[str]:
    """The subset of `names` allowed (Kafka's filterByAuthorized): each distinct name checked once."""
    return {name for name in set(names) if await check(ctx, operation, resource_type, name, audit=False)}


def audit_change(ctx: RequestContext, action: str, target: str, before, after) -> None:
    """An administrative change made over Kafka (ACLs), in the audit log."""
    principal, client = ctx.session.principal, ctx.session.client
    ctx.broker.core.audit.change(who=principal.user if principal is not None else "ANONYMOUS",
                                 source=client.address if client is not None else None, action=action,
                                 target=target, before=before, after=after)


async def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
    """Kafka's authorizedOperations: bit (1 << operation code) set for each supported operation
    allowed on the resource; without enforcement every supported one (a broker without authorizer)."""
    field = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if await check(ctx, operation, resource_type, name, audit=False):
            field |= 1 << acl_wire.code(operation)
    return field


async def authorized_by_resource_type(ctx: RequestContext, operation: Operation, resource_type: ResourceType) -> bool:
    """Kafka's AclAuthorizer.authorizeByResourceType (KIP-679): whether some resource of the type
    may be operated on. Entries count for exactly `operation` or ALL (no implication), as Kafka's
    index of them does. A wildcard DENY refuses; an ALLOW counts unless a DENY covers its name (a
    literal DENY of the same name or a PREFIXED DENY of a prefix of it)."""
    if not enforced(ctx):
        return True
    principal = ctx.session.principal
    if principal is None:
        return False
    authorizer = ctx.broker.authorizer
    who = principal_string(principal)
    if who in authorizer.super_users:
        return True
    host = ctx.session.client_host
    allow: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
    deny: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
    for binding in await authorizer.acls(principal.tenant):
        pattern, entry = binding.pattern, binding.entry
        if (pattern.resource_type is not resource_type or entry.principal not in (who, WILDCARD_PRINCIPAL)
                or entry.operation not in (operation, Operation.ALL)):
            continue
        if entry.permission is Permission.DENY and (host is None or entry.host in (host, WILDCARD)):
            deny[pattern.pattern_type].add(pattern.name)   # an unknown host: every DENY counts
        elif entry.permission is Permission.ALLOW and entry.host in (host, WILDCARD):
            allow[pattern.pattern_type].add(pattern.name)
    if WILDCARD in deny[PatternType.LITERAL]:
        return False
    if authorizer.allow_everyone_if_no_acl_found:
        return True
    if resource_type is ResourceType.TOPIC and await ctx.broker.core.access.grants_some(
            principal, GRANTED_BY.get((resource_type, operation), _NONE)):
        return True   # a grant of the action on some name (not a precise answer when ACLs DENY them all)

    def denied(name: str) -> bool:
        return any(name.startswith(prefix) for prefix in deny[PatternType.PREFIXED])

    return (any(not denied(prefix) for prefix in allow[PatternType.PREFIXED])
            or any(name == WILDCARD or (name not in deny[PatternType.LITERAL] and not denied(name))
                   for name in allow[PatternType.LITERAL]))

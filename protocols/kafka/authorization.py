"""Authorization for Kafka handlers: one call per check, as Kafka's KafkaApis makes them.

Enforcement follows authentication. With SASL off (the listener has no `sasl_mechanisms`) every
connection is anonymous and everything is allowed: ACLs can still be created, described and
deleted, and are kept, but nothing consults them. With SASL on, or on a TLS listener whose client
certificates are the logins (protocols/kafka/certificate_login.py), every check asks the broker's
Authorizer (core/acl.py) for the connection's principal; a connection without one is refused
(the connection machine lets no such connection past SaslHandshake/SaslAuthenticate anyway).

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

from core.acl import (CLUSTER_NAME, WILDCARD, WILDCARD_PRINCIPAL, Operation, PatternType, Permission, ResourceType,
                      principal_string)
from protocols.kafka import acl_wire
from protocols.kafka.broker import RequestContext

__all__ = ["CLUSTER_NAME", "Operation", "ResourceType", "check", "check_cluster", "authorized_names", "enforced",
           "authorized_operations", "authorized_by_resource_type"]

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


def enforced(ctx: RequestContext) -> bool:
    """Whether this connection's requests are subject to ACLs at all."""
    return bool(ctx.broker.settings.sasl_mechanisms) or ctx.session.certificate_login


async def check(ctx: RequestContext, operation: Operation, resource_type: ResourceType, name: str) -> bool:
    if not enforced(ctx):
        return True
    principal = ctx.session.principal
    if principal is None:
        return False
    return await ctx.broker.authorizer.authorize(principal, ctx.session.client_host, operation, resource_type, name)


async def check_cluster(ctx: RequestContext, operation: Operation) -> bool:
    return await check(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


async def authorized_names(ctx: RequestContext, operation: Operation, resource_type: ResourceType,
                           names: Iterable[str]) -> set[str]:
    """The subset of `names` allowed (Kafka's filterByAuthorized): each distinct name checked once."""
    return {name for name in set(names) if await check(ctx, operation, resource_type, name)}


async def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
    """Kafka's authorizedOperations: bit (1 << operation code) set for each supported operation
    allowed on the resource; without enforcement every supported one (a broker without authorizer)."""
    field = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if await check(ctx, operation, resource_type, name):
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

    def denied(name: str) -> bool:
        return any(name.startswith(prefix) for prefix in deny[PatternType.PREFIXED])

    return (any(not denied(prefix) for prefix in allow[PatternType.PREFIXED])
            or any(name == WILDCARD or (name not in deny[PatternType.LITERAL] and not denied(name))
                   for name in allow[PatternType.LITERAL]))

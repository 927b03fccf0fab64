"""Authorization for Kafka handlers: one call per check, as Kafka's KafkaApis makes them.

Enforcement follows authentication. With SASL off (the listener has no `sasl_mechanisms`) every
connection is anonymous and everything is allowed: ACLs can still be created, described and
deleted, and are kept, but nothing consults them. With SASL on, every check asks the broker's
Authorizer (core/acl.py) for the connection's principal; a connection without one is refused
(the connection machine lets no such connection past SaslHandshake/SaslAuthenticate anyway).

    if not await check(ctx, Operation.WRITE, ResourceType.TOPIC, topic.name):
        ...TOPIC_AUTHORIZATION_FAILED for this topic's partitions...

Resource names are the names the client sent (a topic name within the client's namespace);
the CLUSTER resource is named CLUSTER_NAME ("kafka-cluster").
"""

from __future__ import annotations

from collections.abc import Iterable

from core.acl import CLUSTER_NAME, Operation, ResourceType
from protocols.kafka.broker import RequestContext

__all__ = ["CLUSTER_NAME", "Operation", "ResourceType", "check", "check_cluster", "authorized_names", "enforced"]


def enforced(ctx: RequestContext) -> bool:
    """Whether this connection's requests are subject to ACLs at all."""
    return bool(ctx.broker.settings.sasl_mechanisms)


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

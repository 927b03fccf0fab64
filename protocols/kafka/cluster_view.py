"""The cluster as Kafka clients see it: the live brokers, each partition's leader, coordinators.

One process (no cluster) is a one-broker Kafka cluster: this broker leads every partition and
coordinates everything. In a cluster the brokers are the registered ones, a partition's leader is
the broker its bundle is assigned to (replicas = ISR = [leader]: the bookies replicate, not the
brokers), and the coordinator of a group or transactional id is the owner of its bundle.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.cluster.bundles import Bundle, partition_bundle
from core.names import TopicName
from protocols.kafka.broker import RequestContext

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int
    rack: str | None


def brokers(ctx: RequestContext) -> list[Node]:
    cluster = ctx.core.cluster
    if cluster is None:
        return [_this_broker(ctx)]
    return [Node(b.id, b.kafka_host, _port(ctx, b), b.rack) for b in cluster.brokers()]


def _this_broker(ctx: RequestContext) -> Node:
    settings = ctx.broker.settings
    port = settings.tls_port if ctx.session.tls and settings.tls_port else settings.port
    return Node(settings.node_id, settings.host, port, settings.rack)


def _port(ctx: RequestContext, broker) -> int:
    """The port of the listener the client came in on: a TLS client is sent to TLS ports."""
    return broker.kafka_tls_port if ctx.session.tls and broker.kafka_tls_port else broker.kafka_port


def controller_id(ctx: RequestContext) -> int:
    cluster = ctx.core.cluster
    if cluster is None or cluster.leader_id is None:
        return ctx.broker.settings.node_id
    return cluster.leader_id


def partition_leader(ctx: RequestContext, topic: TopicName, index: int) -> int:
    """The node id leading the partition, or NO_LEADER while its bundle has no live owner."""
    cluster = ctx.core.cluster
    if cluster is None:
        return ctx.broker.settings.node_id
    owner = cluster.owner(partition_bundle(topic.tenant, topic.namespace, topic.topic, index))
    return NO_LEADER if owner is None else owner.id


def coordinator(ctx: RequestContext, bundle: Bundle) -> Node | None:
    """The broker that coordinates keys of `bundle`, or None while it has no live owner."""
    cluster = ctx.core.cluster
    if cluster is None:
        return _this_broker(ctx)
    owner = cluster.owner(bundle)
    return None if owner is None else Node(owner.id, owner.kafka_host, _port(ctx, owner), owner.rack)


def serves(ctx: RequestContext, topic: TopicName, index: int) -> bool:
    """Whether this broker serves the partition now (always, in one process)."""
    cluster = ctx.core.cluster
    return cluster is None or cluster.owns(partition_bundle(topic.tenant, topic.namespace, topic.topic, index))

"""Metadata (key 3), versions 0-11.

Behaviour: this broker is the whole cluster: the only broker, the controller and the leader of
every partition (replicas and ISR = [this broker]). A null topic list (v1+) or an empty one (v0)
means every topic of the client's tenant/namespace. An unknown topic is created with the default
partition count when the request allows it (v4+ flag, always before v4) and auto-creation is on.
Leader epochs are -1 everywhere, so clients skip KIP-320 truncation checks consistently.
Gaps: authorized-operations fields are left at "not provided" (-2^31).
"""

import uuid

from core.errors import CoreError, InvalidName, UnknownTopic
from core.names import TopicName
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.schema.metadata import METADATA as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    settings = ctx.broker.settings
    registry = ctx.core.registry
    if request.topics is None or (ctx.version == 0 and not request.topics):
        names = await registry.list_topics(ctx.tenant, ctx.namespace)
    else:
        names = [t.name for t in request.topics]
    may_create = settings.auto_create_topics and (ctx.version < 4 or request.allow_auto_topic_creation)
    topics = [await _describe(name, ctx, may_create) for name in names]
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": settings.node_id, "host": settings.host, "port": settings.port, "rack": settings.rack}],
        "cluster_id": settings.cluster_id,
        "controller_id": settings.node_id,
        "topics": topics,
    }


async def _describe(name: str | None, ctx: RequestContext, may_create: bool) -> dict:
    node = ctx.broker.settings.node_id
    try:
        topic = TopicName.of(name or "", ctx.tenant, ctx.namespace)
        try:
            info = await ctx.core.registry.get_topic(topic)
        except UnknownTopic:
            if not may_create:
                raise
            try:
                info = await ctx.core.create_topic(topic, ctx.broker.settings.default_partitions)
            except CoreError:
                info = await ctx.core.registry.get_topic(topic)   # created concurrently
    except InvalidName:
        return {"error_code": ErrorCode.INVALID_TOPIC_EXCEPTION, "name": name or "", "partitions": []}
    except CoreError as exc:
        return {"error_code": kafka_code(exc), "name": name or "", "partitions": []}
    return {
        "error_code": ErrorCode.NONE,
        "name": name,
        "topic_id": uuid.UUID(hex=info.topic_id),
        "is_internal": False,
        "partitions": [{"error_code": ErrorCode.NONE, "partition_index": index, "leader_id": node,
                        "leader_epoch": -1, "replica_nodes": [node], "isr_nodes": [node], "offline_replicas": []}
                       for index in range(info.partitions)],
    }

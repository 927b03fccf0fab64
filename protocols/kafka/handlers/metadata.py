"""Metadata (key 3), versions 0-12.

Behaviour: the brokers are the live ones (cluster_view.py; one process: this broker alone), the
controller is the cluster's leader broker, and each partition's leader is the broker owning its
bundle, with replicas and ISR = [leader] (the bookies hold the copies); a partition whose bundle has
no live owner yet is LEADER_NOT_AVAILABLE with leader -1, so clients ask again.
A null topic list (v1+) or an empty one (v0)
means every topic of the client's tenant/namespace. An unknown topic is created with the default
partition count when the request allows it (v4+ flag, always before v4) and auto-creation is on.
A topic asked for by id (v12: a null name, as consumers in KIP-848 groups ask for the topics
assigned to them) is looked up by id: UNKNOWN_TOPIC_ID if no topic has it.
Leader epochs: a partition this broker serves and has opened since it took it over is given its
epoch; any other is given -1 ("unknown"), which clients accept from any broker (a lower epoch than
one they saw would be ignored as stale metadata, -1 never is).
__consumer_offsets is listed with is_internal (protocols/kafka/consumer_offsets.py).
With ACLs enforced (SASL on), as in Kafka 2.8: a topic needs DESCRIBE. Asking for all topics, the
others are left out; a named one is answered TOPIC_AUTHORIZATION_FAILED (no partitions, zero topic
id) without looking it up, so its existence is not revealed. Auto-creating a missing topic also
needs CREATE on the cluster or on the topic (else TOPIC_AUTHORIZATION_FAILED). When asked (v8+),
topic_authorized_operations (topics described) and cluster_authorized_operations (v8-10; 0 without
DESCRIBE on the cluster) are the bit fields of allowed operations; with SASL off, every supported
operation, as a Kafka broker without an authorizer answers.
Gaps: none known.
"""

import uuid

from core.acl import CLUSTER_NAME
from core.errors import CoreError, InvalidName, UnknownTopic
from core.names import TopicName
from core.system_topics import SYSTEM_TOPICS
from protocols.kafka.authorization import (Operation, ResourceType, authorized_operations, check, check_cluster,
                                           enforced)
from protocols.kafka.broker import RequestContext
from protocols.kafka.cluster_view import NO_LEADER, brokers, controller_id, partition_leader
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.codec.types import ZERO_UUID
from protocols.kafka.consumer_offsets import INTERNAL_TOPICS
from protocols.kafka.errors import kafka_code
from protocols.kafka.schema.metadata import METADATA as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    settings = ctx.broker.settings
    registry = ctx.core.registry
    all_topics = request.topics is None or (ctx.version == 0 and not request.topics)
    unknown_ids = []
    if all_topics:
        names = await registry.list_topics(ctx.tenant, ctx.namespace)
    else:
        names = []
        for wanted in request.topics:
            if wanted.name is None and wanted.topic_id != ZERO_UUID:
                info = await ctx.core.topic_by_id(ctx.tenant, ctx.namespace, wanted.topic_id.hex)
                if info is None:
                    unknown_ids.append(wanted.topic_id)
                else:
                    names.append(info.name.topic)
            else:
                names.append(wanted.name)
    may_create = settings.auto_create_topics and (ctx.version < 4 or request.allow_auto_topic_creation) \
        and not all_topics
    acl = _Decisions(ctx) if enforced(ctx) else None
    topics = []
    described = []   # the topics Kafka reports authorized operations for
    for name in names:
        if acl is not None and not await acl.may_describe(name or "", audit=not all_topics):
            if not all_topics:   # all topics: the ones not describable are left out
                topics.append(_unauthorized(name))
            continue
        topic = await _describe(name, ctx, may_create, acl)
        topics.append(topic)
        if topic["error_code"] != ErrorCode.TOPIC_AUTHORIZATION_FAILED:   # not a refused auto-creation
            described.append(topic)
    topics += [{"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": topic_id, "partitions": []}
               for topic_id in unknown_ids]
    response = {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": n.node_id, "host": n.host, "port": n.port, "rack": n.rack} for n in brokers(ctx)],
        "cluster_id": settings.cluster_id,
        "controller_id": controller_id(ctx),
        "topics": topics,
    }
    if request.include_topic_authorized_operations:
        for topic in described:
            topic["topic_authorized_operations"] = await authorized_operations(ctx, ResourceType.TOPIC, topic["name"])
    if request.include_cluster_authorized_operations:   # v8-10
        response["cluster_authorized_operations"] = (
            await authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
            if await check_cluster(ctx, Operation.DESCRIBE, audit=False) else 0)
    return response


class _Decisions:
    """One request's ACL decisions: DESCRIBE per topic, CREATE on the cluster asked once."""

    def __init__(self, ctx: RequestContext) -> None:
        self._ctx = ctx
        self._cluster_create: bool | None = None

    async def may_describe(self, name: str, *, audit: bool = True) -> bool:
        return await check(self._ctx, Operation.DESCRIBE, ResourceType.TOPIC, name, audit=audit)

    async def may_create(self, name: str) -> bool:
        if self._cluster_create is None:
            self._cluster_create = await check_cluster(self._ctx, Operation.CREATE, audit=False)
        return self._cluster_create or await check(self._ctx, Operation.CREATE, ResourceType.TOPIC, name)


def _unauthorized(name: str | None) -> dict:
    return {"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name or "", "is_internal": False,
            "partitions": []}


async def _describe(name: str | None, ctx: RequestContext, may_create: bool, acl: _Decisions | None) -> dict:
    try:
        try:
            topic = TopicName.of(name or "", ctx.tenant, ctx.namespace)
        except InvalidName:
            # Not a topic that exists: creating it needs CREATE too (Kafka then finds it invalid).
            if may_create and acl is not None and not await acl.may_create(name or ""):
                return _unauthorized(name)
            raise
        try:
            info = await ctx.core.registry.get_topic(topic)
        except UnknownTopic:
            if not may_create or name in SYSTEM_TOPICS:   # the core makes its own when it needs them
                raise
            if acl is not None and not await acl.may_create(name or ""):
                return _unauthorized(name)
            try:
                if name in INTERNAL_TOPICS:   # created as Kafka creates it, whoever asks first
                    await ctx.broker.consumer_offsets.ensure_topic(ctx.tenant, ctx.namespace)
                    info = await ctx.core.registry.get_topic(topic)
                else:
                    partitions = await ctx.core.default_partitions(topic.tenant, topic.namespace,
                                                                   ctx.broker.settings.default_partitions)
                    info = await ctx.core.create_topic(topic, partitions)
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
        "is_internal": name in INTERNAL_TOPICS or name in SYSTEM_TOPICS,
        "partitions": [_partition(index, partition_leader(ctx, topic, index), ctx.core.leader_epoch(topic, index))
                       for index in range(info.partitions)],
    }


def _partition(index: int, leader: int, epoch: int) -> dict:
    if leader == NO_LEADER:
        return {"error_code": ErrorCode.LEADER_NOT_AVAILABLE, "partition_index": index, "leader_id": NO_LEADER,
                "leader_epoch": -1, "replica_nodes": [], "isr_nodes": [], "offline_replicas": []}
    return {"error_code": ErrorCode.NONE, "partition_index": index, "leader_id": leader,
            "leader_epoch": epoch, "replica_nodes": [leader], "isr_nodes": [leader], "offline_replicas": []}

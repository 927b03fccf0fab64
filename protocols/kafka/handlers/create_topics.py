"""CreateTopics (key 19), versions 0-7.

Behaviour: checks run in Kafka's order with Kafka's codes: a topic named twice in one request
(INVALID_REQUEST), an existing topic (TOPIC_ALREADY_EXISTS), null config values (INVALID_REQUEST),
counts given together with a manual assignment (INVALID_REQUEST), partition count < 1
(INVALID_PARTITIONS), replication factor < 1 or > 1 (INVALID_REPLICATION_FACTOR: this broker is
the only one), an illegal name or one colliding with an existing topic once '.' and '_' are
equated (INVALID_TOPIC_EXCEPTION), a malformed manual assignment (INVALID_REPLICA_ASSIGNMENT),
then the configs (INVALID_CONFIG). -1 partitions / replication factor mean the broker defaults
(num.partitions, 1). validate_only checks everything and creates nothing. v5+ results carry the
partition count, replication factor and every topic config; v7 the new topic's id. As in Kafka,
timeout_ms <= 0 answers REQUEST_TIMED_OUT for topics that were nevertheless created.
With ACLs enforced (SASL on), as in Kafka 2.8: after the duplicate check, a topic needs CREATE on
the cluster or on the topic (TOPIC_AUTHORIZATION_FAILED, "Authorization failed."); without
DESCRIBE_CONFIGS on the topic its v5+ result has topic_config_error_code TOPIC_AUTHORIZATION_FAILED
and no configs, counts or topic id (reset to NONE when the creation itself fails).
Gaps: a manual assignment naming any broker but this one is refused (INVALID_REPLICA_ASSIGNMENT;
Kafka would create offline partitions); topics are created in the client's tenant/namespace, and
name collisions are checked within it; no CreateTopicPolicy, no quotas (throttle time is 0).
"""

import logging
import uuid
from collections import Counter

from core.errors import CoreError, InvalidName, UnknownTopic
from core.names import TopicName
from core.registry import TopicInfo
from core.system_topics import refuse_change
from protocols.kafka.admin.configs import BrokerLevels, topic_config_entries
from protocols.kafka.admin.errors import ApiError, timed_out_unless_waited
from protocols.kafka.authorization import Operation, ResourceType, authorized_names, check_cluster, enforced
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.create_topics import CREATE_TOPICS as API

log = logging.getLogger("gateway.kafka")

NO_NUM_PARTITIONS = -1
NO_REPLICATION_FACTOR = -1
AVAILABLE_BROKERS = 1


async def handle(request: Msg, ctx: RequestContext) -> dict:
    named = Counter(topic.name for topic in request.topics)
    creatable, config_visible = await _authorized(ctx, list(named))
    results = []
    for topic in request.topics:
        result = {"name": topic.name, "error_code": ErrorCode.NONE, "error_message": None, "configs": []}
        results.append(result)
        if config_visible is not None and topic.name not in config_visible:
            result["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if named[topic.name] > 1:
            result.update(error_code=ErrorCode.INVALID_REQUEST, error_message="Found multiple entries for this topic.")
            continue
        if creatable is not None and topic.name not in creatable:
            result.update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Authorization failed.")
            continue
        try:
            info = await _create(topic, request.validate_only, ctx)
        except ApiError as err:
            result.update(error_code=err.code, error_message=err.message, topic_config_error_code=ErrorCode.NONE)
            continue
        code = ErrorCode.NONE if request.validate_only else timed_out_unless_waited(ErrorCode.NONE, request.timeout_ms)
        if code != ErrorCode.NONE:
            result.update(error_code=code, topic_config_error_code=ErrorCode.NONE)
            continue
        if config_visible is not None and topic.name not in config_visible:
            continue   # created; what it was created with is not this client's to see
        result.update(num_partitions=info.partitions, replication_factor=1,
                      configs=[entry.created() for entry in topic_config_entries(info.configs, BrokerLevels.of(ctx.core.broker_configs))])
        if not request.validate_only:
            result["topic_id"] = uuid.UUID(hex=info.topic_id)
    return {"throttle_time_ms": 0, "topics": results}


async def _authorized(ctx: RequestContext, names: list[str]) -> tuple[set[str] | None, set[str] | None]:
    """(the topics that may be created, those whose configs may be described); None: all."""
    if not enforced(ctx):
        return None, None
    creatable = None if await check_cluster(ctx, Operation.CREATE) else \
        await authorized_names(ctx, Operation.CREATE, ResourceType.TOPIC, names)
    return creatable, await authorized_names(ctx, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names)


async def _create(topic: Msg, validate_only: bool, ctx: RequestContext) -> TopicInfo:
    try:
        name, invalid = TopicName.of(topic.name, ctx.tenant, ctx.namespace), None
    except InvalidName as exc:
        name, invalid = None, exc
    if name is not None and await _exists(name, ctx):
        raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic.name}' already exists.")
    null_configs = [config.name for config in topic.configs if config.value is None]
    if null_configs:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Null value not supported for topic configs : {','.join(null_configs)}")
    if topic.assignments:
        if topic.num_partitions != NO_NUM_PARTITIONS or topic.replication_factor != NO_REPLICATION_FACTOR:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Both numPartitions or replicationFactor and replicasAssignments "
                                                      "were set. Both cannot be used at the same time.")
        partitions = len(topic.assignments)
    else:
        partitions = topic.num_partitions if topic.num_partitions != NO_NUM_PARTITIONS else \
            await ctx.core.default_partitions(ctx.tenant, ctx.namespace, ctx.broker.settings.default_partitions)
        _check_counts(partitions, 1 if topic.replication_factor == NO_REPLICATION_FACTOR else topic.replication_factor)
    if name is None:
        raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(invalid))
    await _check_collisions(name, ctx)
    if topic.assignments:
        _check_assignment(topic.assignments, ctx.broker.settings.node_id)
    try:
        refuse_change(name.topic)
        info = await ctx.core.create_topic(name, partitions, {c.name: c.value for c in topic.configs},
                                           validate_only=validate_only)
    except CoreError as exc:
        raise ApiError.of(exc) from None
    if not validate_only:
        log.info("created topic %s: %d partition(s), configs %s", name, info.partitions, info.configs)
    return info


async def _exists(name: TopicName, ctx: RequestContext) -> bool:
    try:
        await ctx.core.registry.get_topic(name)
    except UnknownTopic:
        return False
    return True


def _check_counts(partitions: int, replication_factor: int) -> None:
    if partitions <= 0:
        raise ApiError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > AVAILABLE_BROKERS:
        raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"Replication factor: {replication_factor} larger than available brokers: {AVAILABLE_BROKERS}.")


async def _check_collisions(name: TopicName, ctx: RequestContext) -> None:
    """Kafka refuses a name equal to an existing one once '.' and '_' are taken as the same
    (their metric names would clash)."""
    if "." not in name.topic and "_" not in name.topic:
        return
    folded = name.topic.replace(".", "_")
    existing = await ctx.core.registry.list_topics(name.tenant, name.namespace)
    colliding = [other for other in existing if other != name.topic and other.replace(".", "_") == folded]
    if colliding:
        raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                       f"Topic '{name.topic}' collides with existing topics: {', '.join(colliding)}")


def _check_assignment(assignments: list, node_id: int) -> None:
    by_partition = {a.partition_index: list(a.broker_ids) for a in assignments}
    if len({len(brokers) for brokers in by_partition.values()}) != 1:
        raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All partitions should have the same number of replicas")
    for brokers in by_partition.values():
        if len(brokers) != len(set(brokers)):
            raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Duplicate replica assignment found: {by_partition}")
    if len(by_partition) != len(assignments) or sorted(by_partition) != list(range(len(by_partition))):
        raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence")
    for index, brokers in sorted(by_partition.items()):
        if not brokers:
            raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Cannot have replication factor of 0 for partition id {index}.")
        unknown = sorted(set(brokers) - {node_id})
        if unknown:
            raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")

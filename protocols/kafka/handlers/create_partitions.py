"""CreatePartitions (key 37), versions 0-3.

Behaviour: grows a topic to `count` partitions; the new ones are empty and led by this broker.
Kafka's checks and codes: a topic named twice (INVALID_REQUEST), an unknown topic
(UNKNOWN_TOPIC_OR_PARTITION), a count that does not grow the topic (INVALID_PARTITIONS), a
manual assignment naming another broker, of the wrong length, or with other than one replica
per partition (INVALID_REPLICA_ASSIGNMENT). validate_only checks and changes nothing. As in Kafka,
timeout_ms <= 0 answers REQUEST_TIMED_OUT for topics that were nevertheless grown. With ACLs
enforced (SASL on), after the duplicate check a topic needs ALTER (TOPIC_AUTHORIZATION_FAILED, "The
topic authorization is failed."), checked before its existence, as in Kafka 2.8.
Gaps: no quotas (throttle time is 0).
"""

import logging
from collections import Counter

from core.errors import CoreError
from core.system_topics import refuse_change
from protocols.kafka.admin.errors import ApiError, timed_out_unless_waited
from protocols.kafka.admin.topics import existing_topic
from protocols.kafka.authorization import Operation, ResourceType, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.create_partitions import CREATE_PARTITIONS as API

log = logging.getLogger("gateway.kafka")


async def handle(request: Msg, ctx: RequestContext) -> dict:
    named = Counter(topic.name for topic in request.topics)
    results = []
    answered = set()
    for topic in request.topics:
        if topic.name in answered:
            continue
        answered.add(topic.name)
        result = {"name": topic.name, "error_code": ErrorCode.NONE, "error_message": None}
        results.append(result)
        if named[topic.name] > 1:
            result.update(error_code=ErrorCode.INVALID_REQUEST, error_message="Duplicate topic in request.")
            continue
        if not await check(ctx, Operation.ALTER, ResourceType.TOPIC, topic.name):
            result.update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                          error_message="The topic authorization is failed.")
            continue
        try:
            await _grow(topic, request.validate_only, ctx)
        except ApiError as err:
            result.update(error_code=err.code, error_message=err.message)
            continue
        if not request.validate_only:
            result["error_code"] = timed_out_unless_waited(ErrorCode.NONE, request.timeout_ms)
    return {"throttle_time_ms": 0, "results": results}


async def _grow(topic: Msg, validate_only: bool, ctx: RequestContext) -> None:
    info = await existing_topic(ctx, topic.name)
    increment = topic.count - info.partitions
    if increment < 0:
        raise ApiError(ErrorCode.INVALID_PARTITIONS, f"Topic currently has {info.partitions} partitions, "
                                                     f"which is higher than the requested {topic.count}.")
    if increment == 0:
        raise ApiError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {info.partitions} partitions.")
    if topic.assignments is not None:
        _check_assignment([list(a.broker_ids) for a in topic.assignments], increment, info.partitions,
                          ctx.broker.settings.node_id)
    try:
        refuse_change(info.name.topic)
        await ctx.core.add_partitions(info.name, topic.count, validate_only=validate_only)
    except CoreError as exc:
        raise ApiError.of(exc) from None
    if not validate_only:
        log.info("topic %s grown from %d to %d partitions", info.name, info.partitions, topic.count)


def _check_assignment(assignments: list[list[int]], increment: int, first_new: int, node_id: int) -> None:
    unknown = sorted({broker for brokers in assignments for broker in brokers} - {node_id})
    if unknown:
        raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
    if len(assignments) != increment:
        raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Increasing the number of partitions by {increment} "
                                                             f"but {len(assignments)} assignments provided.")
    for partition_id, brokers in enumerate(assignments, start=first_new):
        if not brokers:
            raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Cannot have replication factor of 0 for partition id {partition_id}.")
        if len(brokers) != len(set(brokers)):
            raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Duplicate brokers not allowed in replica assignment: "
                           f"{', '.join(map(str, brokers))} for partition id {partition_id}.")

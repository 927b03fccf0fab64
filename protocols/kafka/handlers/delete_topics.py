"""DeleteTopics (key 20), versions 0-6.

Behaviour: each named topic of the client's tenant/namespace is deleted at once, partitions, data
and cursors included. v6 names a topic by name or by id (UNKNOWN_TOPIC_ID for an id no topic
has; a name and an id together fail the whole request with INVALID_REQUEST, as in Kafka). An
unknown or illegal name is UNKNOWN_TOPIC_OR_PARTITION. As in Kafka, timeout_ms <= 0 answers
REQUEST_TIMED_OUT for topics that were nevertheless deleted. The core's system topics
(core/system_topics.py) are INVALID_TOPIC_EXCEPTION.
With ACLs enforced (SASL on), as in Kafka 2.8: a topic named by id without DESCRIBE on it is
answered with a null name and TOPIC_AUTHORIZATION_FAILED; otherwise DELETE on the topic is needed,
checked before its existence (TOPIC_AUTHORIZATION_FAILED).
Gaps: finding a topic by id scans the namespace's topics (ids are not indexed); no quotas.
"""

import logging
import uuid

from core.errors import CoreError
from core.registry import TopicInfo
from core.system_topics import refuse_change
from protocols.kafka.admin.errors import timed_out_unless_waited
from protocols.kafka.admin.topics import find_topic
from protocols.kafka.authorization import Operation, ResourceType, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.schema.delete_topics import DELETE_TOPICS as API

NO_ID = uuid.UUID(int=0)

log = logging.getLogger("gateway.kafka")


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if ctx.version >= 6:
        asked = [(topic.name, topic.topic_id) for topic in request.topics]
    else:
        asked = [(name, NO_ID) for name in request.topic_names]
    if any(name is not None and topic_id != NO_ID for name, topic_id in asked):
        message = "Topic name and topic ID can not both be specified."
        return {"throttle_time_ms": 0, "responses": [
            {"name": name, "topic_id": topic_id, "error_code": ErrorCode.INVALID_REQUEST, "error_message": message}
            for name, topic_id in asked]}
    outcomes: dict[tuple, dict] = {}   # a topic asked for twice is deleted once
    responses = []
    for name, topic_id in asked:
        if (name, topic_id) not in outcomes:
            outcomes[name, topic_id] = await _delete(name, topic_id, ctx)
        result = dict(outcomes[name, topic_id])
        result["error_code"] = timed_out_unless_waited(result["error_code"], request.timeout_ms)
        responses.append(result)
    return {"throttle_time_ms": 0, "responses": responses}


async def _delete(name: str | None, topic_id: uuid.UUID, ctx: RequestContext) -> dict:
    result = {"name": name, "topic_id": topic_id, "error_code": ErrorCode.NONE, "error_message": None}
    info = await _resolve(name, topic_id, ctx)
    if topic_id != NO_ID:
        if info is None:
            result["error_code"] = ErrorCode.UNKNOWN_TOPIC_ID
            return result
        name = result["name"] = info.name.topic
        if not await check(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name):
            result.update(name=None, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)   # the name stays secret
            return result
    if not await check(ctx, Operation.DELETE, ResourceType.TOPIC, name or ""):
        result["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return result
    if info is None:
        result["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return result
    try:
        refuse_change(info.name.topic)
        await ctx.core.delete_topic(info.name)
    except CoreError as exc:
        result["error_code"] = kafka_code(exc)
        return result
    log.info("deleted topic %s", info.name)
    return result


async def _resolve(name: str | None, topic_id: uuid.UUID, ctx: RequestContext) -> TopicInfo | None:
    if topic_id != NO_ID:
        return await ctx.core.topic_by_id(ctx.tenant, ctx.namespace, topic_id.hex)
    return await find_topic(ctx, name)


"""DeleteRecords (key 21), versions 0-2.

Behaviour: moves each partition's log start offset up to the given offset (-1: the high
watermark) and answers the new low watermark; storage ledgers wholly below it are deleted. An
offset below the current start changes nothing; one past the high watermark, or negative other
than -1, is OFFSET_OUT_OF_RANGE. A topic whose cleanup.policy lacks "delete" is POLICY_VIOLATION,
and an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION, as in Kafka. With ACLs enforced
(SASL on), each topic needs DELETE, checked before its existence (TOPIC_AUTHORIZATION_FAILED).
Gaps: none known (timeout_ms is moot: the only replica is this broker's).
"""

from core.errors import CoreError
from core.system_topics import refuse_change
from protocols.kafka.admin.errors import ApiError
from protocols.kafka.admin.topics import existing_topic
from protocols.kafka.authorization import Operation, ResourceType, authorized_names, enforced
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.delete_records import DELETE_RECORDS as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    topics = []
    deletable = await authorized_names(ctx, Operation.DELETE, ResourceType.TOPIC,
                                       (t.name for t in request.topics)) if enforced(ctx) else None
    for topic in request.topics:
        partitions = []
        topics.append({"name": topic.name, "partitions": partitions})
        denied = deletable is not None and topic.name not in deletable
        for asked in topic.partitions:
            answer = {"partition_index": asked.partition_index, "low_watermark": -1, "error_code": ErrorCode.NONE}
            partitions.append(answer)
            if denied:
                answer["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            try:
                answer["low_watermark"] = await _delete(topic.name, asked.partition_index, asked.offset, ctx)
            except ApiError as err:
                answer["error_code"] = err.code
    return {"throttle_time_ms": 0, "topics": topics}


async def _delete(name: str, index: int, offset: int, ctx: RequestContext) -> int:
    info = await existing_topic(ctx, name)
    if not 0 <= index < info.partitions:
        raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if not ctx.core.effective_config(info).deletes:   # the topic's cleanup.policy, or the broker's
        raise ApiError(ErrorCode.POLICY_VIOLATION,
                       f"Records of partition {name}-{index} can not be deleted due to the configured policy")
    try:
        refuse_change(info.name.topic)
        partition = await ctx.core.partition(info.name, index)
        return await partition.delete_records_before(offset)
    except CoreError as exc:
        raise ApiError.of(exc) from None

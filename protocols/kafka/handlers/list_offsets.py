"""ListOffsets (key 2), versions 0-6.

Behaviour: timestamp -2 = earliest (log start offset), -1 = latest (the high watermark; for
isolation_level 1, read_committed, v2+: the last stable offset), otherwise the first offset whose
record timestamp is at or after it (-1/-1 when there is none, or for read_committed when it is not
below the last stable offset). v0 answers in old_style_offsets.
With ACLs enforced (SASL on), each topic needs DESCRIBE, checked before its existence
(TOPIC_AUTHORIZATION_FAILED), as in Kafka.
Gaps: none known for 2.8's range (max-timestamp lookup, -3, is v7).
"""

from core.errors import CoreError
from core.names import TopicName
from protocols.kafka.authorization import Operation, ResourceType, authorized_names, enforced
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.schema.list_offsets import LIST_OFFSETS as API

EARLIEST, LATEST = -2, -1
READ_COMMITTED = 1


async def handle(request: Msg, ctx: RequestContext) -> dict:
    topics = []
    describable = await authorized_names(ctx, Operation.DESCRIBE, ResourceType.TOPIC,
                                         (t.name for t in request.topics)) if enforced(ctx) else None
    committed = ctx.version >= 2 and request.isolation_level == READ_COMMITTED
    for topic in request.topics:
        partitions = []
        topics.append({"name": topic.name, "partitions": partitions})
        denied = describable is not None and topic.name not in describable
        for asked in topic.partitions:
            answer = {"partition_index": asked.partition_index, "error_code": ErrorCode.NONE}
            partitions.append(answer)
            if denied:
                answer["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            try:
                partition = await ctx.core.partition(TopicName.of(topic.name, ctx.tenant, ctx.namespace),
                                                     asked.partition_index)
                if asked.timestamp == EARLIEST:
                    offset, timestamp = partition.log_start_offset, -1
                elif asked.timestamp == LATEST:
                    offset = partition.last_stable_offset if committed else partition.high_watermark
                    timestamp = -1
                else:
                    found = await partition.offset_for_timestamp(asked.timestamp)
                    if found is not None and committed and found[0] >= partition.last_stable_offset:
                        found = None   # read_committed sees nothing from the last stable offset on
                    offset, timestamp = found if found is not None else (-1, -1)
            except CoreError as exc:
                answer["error_code"] = kafka_code(exc)
                continue
            answer.update(offset=offset, timestamp=timestamp, old_style_offsets=[offset] if offset >= 0 else [])
    return {"throttle_time_ms": 0, "topics": topics}

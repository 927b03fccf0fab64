"""ListOffsets (key 2), versions 0-7.

Behaviour: timestamp -2 = earliest (log start offset), -1 = latest (the high watermark; for
isolation_level 1, read_committed, v2+: the last stable offset), -3 = max timestamp (KIP-734: the
first record with the partition's highest timestamp, and that timestamp), otherwise the first
offset whose record timestamp is at or after it. A timestamp lookup (-3 included) finds nothing
(-1/-1) when no record qualifies or the one found is not below the high watermark (read_committed:
the last stable offset). As a Kafka 3.x broker does, -3 is answered so at v1-6 too (clients send it
only at v7+); v0 (offsets before a time) answers it with no offsets. v0 answers in
old_style_offsets.
Leader epochs (v4+): the answer names the epoch in which the offset was written (for latest, the
partition's current epoch; -1 for records older than epochs, or no offset); a current_leader_epoch
older than the partition's is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH.
With ACLs enforced (SASL on), each topic needs DESCRIBE, checked before its existence
(TOPIC_AUTHORIZATION_FAILED), as in Kafka.
Gaps: none known.
"""

from core.errors import CoreError
from core.names import TopicName
from protocols.kafka.authorization import Operation, ResourceType, authorized_names, enforced
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.schema.list_offsets import LIST_OFFSETS as API

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
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
                partition.check_leader_epoch(asked.current_leader_epoch)
                if asked.timestamp == EARLIEST:
                    offset, timestamp = partition.log_start_offset, -1
                elif asked.timestamp == LATEST:
                    offset = partition.last_stable_offset if committed else partition.high_watermark
                    timestamp = -1
                elif asked.timestamp == MAX_TIMESTAMP and ctx.version == 0:
                    offset, timestamp = -1, -1   # no offsets before time -3
                else:
                    if asked.timestamp == MAX_TIMESTAMP:
                        found = await partition.offset_of_max_timestamp()
                    else:
                        found = await partition.offset_for_timestamp(asked.timestamp)
                    fetchable = partition.last_stable_offset if committed else partition.high_watermark
                    if found is not None and found[0] >= fetchable:
                        found = None   # not readable (yet) at this isolation level
                    offset, timestamp = found if found is not None else (-1, -1)
            except CoreError as exc:
                answer["error_code"] = kafka_code(exc)
                continue
            epoch = partition.leader_epoch if asked.timestamp == LATEST else partition.log.epoch_at(offset)
            answer.update(offset=offset, timestamp=timestamp, old_style_offsets=[offset] if offset >= 0 else [],
                          leader_epoch=epoch if offset >= 0 else -1)
    return {"throttle_time_ms": 0, "topics": topics}

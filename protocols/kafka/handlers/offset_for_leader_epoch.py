"""OffsetForLeaderEpoch (key 23), versions 0-4.

Behaviour: for each partition and leader_epoch asked, the largest epoch at or below it and the
offset where that epoch ended: the start of the next epoch, or the high watermark for the current
one (what a consumer may have read; clients compare it with their position to detect truncation,
KIP-320). An epoch older than every recorded one gets the start of the oldest recorded (its records
were removed by retention or predate epochs); one newer than the current, or -1, gets -1/-1
("undefined"), as in Kafka. A current_leader_epoch (v2+) older than the partition's is
FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH. An unknown topic or partition is
UNKNOWN_TOPIC_OR_PARTITION; a partition another broker of the cluster serves is
NOT_LEADER_OR_FOLLOWER.
With ACLs enforced (SASL on), as in Kafka: CLUSTER_ACTION on the cluster allows every topic, else
each topic needs DESCRIBE (TOPIC_AUTHORIZATION_FAILED, before the existence check).
Gaps: none known.
"""

from core.errors import CoreError
from protocols.kafka.admin.topics import find_topic
from protocols.kafka.authorization import Operation, ResourceType, authorized_names, check_cluster, enforced
from protocols.kafka.broker import RequestContext
from protocols.kafka.cluster_view import serves
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.schema.offset_for_leader_epoch import OFFSET_FOR_LEADER_EPOCH as API

NO_EPOCH = -1
UNDEFINED_OFFSET = -1


async def handle(request: Msg, ctx: RequestContext) -> dict:
    topics = []
    describable = await _describable(request, ctx)
    for topic in request.topics:
        denied = describable is not None and topic.topic not in describable
        info = None if denied else await find_topic(ctx, topic.topic)
        partitions = []
        for asked in topic.partitions:
            answer = {"partition": asked.partition, "error_code": ErrorCode.NONE,
                      "leader_epoch": NO_EPOCH, "end_offset": UNDEFINED_OFFSET}
            if denied:
                answer["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None or not 0 <= asked.partition < info.partitions:
                answer["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not serves(ctx, info.name, asked.partition):
                answer["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                try:
                    partition = await ctx.core.partition(info.name, asked.partition)
                    partition.check_leader_epoch(asked.current_leader_epoch)
                except CoreError as exc:
                    answer["error_code"] = kafka_code(exc)
                else:
                    answer["leader_epoch"], answer["end_offset"] = partition.log.epoch_end(asked.leader_epoch)
            partitions.append(answer)
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


async def _describable(request: Msg, ctx: RequestContext) -> set[str] | None:
    """The topics that may be asked about; None: all (no ACLs to consult, or CLUSTER_ACTION)."""
    if not enforced(ctx) or await check_cluster(ctx, Operation.CLUSTER_ACTION, audit=False):
        return None
    return await authorized_names(ctx, Operation.DESCRIBE, ResourceType.TOPIC, (t.topic for t in request.topics))

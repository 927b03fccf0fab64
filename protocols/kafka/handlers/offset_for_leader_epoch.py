"""OffsetForLeaderEpoch (key 23), versions 0-4.

Behaviour: the gateway keeps no leader epochs: Metadata, Fetch and the stored batches all say -1.
A Kafka broker whose log has no epoch history (its epoch cache is empty, or the epoch asked is
-1) answers NONE with leader_epoch -1 and end_offset -1 ("undefined"), so this one does too, for
every existing partition. A current_leader_epoch other than -1 (v2+) is checked as Kafka checks
it against the leader's epoch, here -1: a larger one is UNKNOWN_LEADER_EPOCH. An unknown topic or
partition is UNKNOWN_TOPIC_OR_PARTITION; a partition another broker of the cluster serves is
NOT_LEADER_OR_FOLLOWER. Clients ask only when they hold an epoch >= 0, which
this gateway never hands out, so they do not normally send this request at all.
With ACLs enforced (SASL on), as in Kafka: CLUSTER_ACTION on the cluster allows every topic, else
each topic needs DESCRIBE (TOPIC_AUTHORIZATION_FAILED, before the existence check).
Gaps: none known.
"""

from protocols.kafka.admin.topics import find_topic
from protocols.kafka.authorization import Operation, ResourceType, authorized_names, check_cluster, enforced
from protocols.kafka.broker import RequestContext
from protocols.kafka.cluster_view import serves
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
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
            elif asked.current_leader_epoch > NO_EPOCH:
                answer["error_code"] = ErrorCode.UNKNOWN_LEADER_EPOCH
            partitions.append(answer)
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


async def _describable(request: Msg, ctx: RequestContext) -> set[str] | None:
    """The topics that may be asked about; None: all (no ACLs to consult, or CLUSTER_ACTION)."""
    if not enforced(ctx) or await check_cluster(ctx, Operation.CLUSTER_ACTION):
        return None
    return await authorized_names(ctx, Operation.DESCRIBE, ResourceType.TOPIC, (t.topic for t in request.topics))

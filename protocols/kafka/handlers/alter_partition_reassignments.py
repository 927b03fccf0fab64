"""AlterPartitionReassignments (key 45), version 0.

Behaviour: with one broker the only assignment a partition can have is [this broker]: moving it
there is a no-op that succeeds; a replica list that is empty, repeats a broker, holds a negative
id or names any other broker is INVALID_REPLICA_ASSIGNMENT (in Kafka's words for each); cancelling
(null replicas) is NO_REASSIGNMENT_IN_PROGRESS, there never being one; an unknown partition is
UNKNOWN_TOPIC_OR_PARTITION. With ACLs enforced (SASL on), the request needs ALTER on the cluster:
without it the whole answer and every partition are CLUSTER_AUTHORIZATION_FAILED, as in Kafka.
Gaps: the refusal's message is "Cluster authorization failed." (Kafka's quotes its internal
request description).
"""

from protocols.kafka import acl_wire
from protocols.kafka.admin.topics import find_topic
from protocols.kafka.authorization import Operation, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.alter_partition_reassignments import ALTER_PARTITION_REASSIGNMENTS as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not await check_cluster(ctx, Operation.ALTER):
        return _refused(request, *acl_wire.CLUSTER_AUTHORIZATION_FAILED)
    node_id = ctx.broker.settings.node_id
    responses = []
    for topic in request.topics:
        info = await find_topic(ctx, topic.name)
        partitions = []
        for asked in topic.partitions:
            exists = info is not None and 0 <= asked.partition_index < info.partitions
            code, message = _outcome(asked.replicas, exists, node_id)
            partitions.append({"partition_index": asked.partition_index, "error_code": code, "error_message": message})
        responses.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "responses": responses}


def _refused(request: Msg, code: int, message: str) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": [
        {"name": topic.name, "partitions": [{"partition_index": p.partition_index, "error_code": code,
                                             "error_message": message} for p in topic.partitions]}
        for topic in request.topics]}


def _outcome(replicas: list[int] | None, exists: bool, node_id: int) -> tuple[ErrorCode, str | None]:
    if replicas is None:
        return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."
    if not replicas:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Empty replica list specified in partition reassignment."
    if len(set(replicas)) != len(replicas):
        return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Duplicate replica ids in partition reassignment replica list: {replicas}")
    if any(broker < 0 for broker in replicas):
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Invalid broker id in replica list: {replicas}"
    adding = [broker for broker in replicas if broker != node_id]
    if adding:
        return (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Replica assignment has brokers that are not alive. "
                f"Replica list: {adding}, live broker list: [{node_id}]")
    if not exists:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
    return ErrorCode.NONE, None

"""AlterPartitionReassignments (key 45), version 0.

Behaviour: a partition's replicas are the one broker that owns its bundle (the bookies replicate,
not the brokers), so a reassignment names the partition's new owner: the first broker of the list
(Kafka's preferred leader); the others must be live brokers too, as Kafka checks, but hold nothing.
In a cluster the partition's bundle is placed on that broker (core/cluster/placements.py): the
leader moves the bundle and keeps it there, the old owner seals the partitions' ledgers and the new
one continues them on new ledgers (a logical-queue move: offsets stay dense, nothing is copied).
A bundle holds several partitions (and groups), which move with it; two partitions of one bundle
sent to different brokers in one request: the later is INVALID_REPLICA_ASSIGNMENT. Cancelling
(null replicas) places a bundle still moving back on the broker it came from, else it is
NO_REASSIGNMENT_IN_PROGRESS. In one process the only owner is this broker: moving a partition there
succeeds and changes nothing. A replica list that is empty, repeats a broker, holds a negative id
or names a broker that is not alive (or is read-only) is INVALID_REPLICA_ASSIGNMENT (in Kafka's
words for each); an unknown partition is UNKNOWN_TOPIC_OR_PARTITION. With ACLs enforced (SASL on),
the request needs ALTER on the cluster: without it the whole answer and every partition are
CLUSTER_AUTHORIZATION_FAILED, as in Kafka.
Gaps: the refusal's message is "Cluster authorization failed." (Kafka's quotes its internal
request description); the answer does not wait for the moves (Kafka's does not either).
"""

from core.cluster.bundles import Bundle, partition_bundle
from protocols.kafka import acl_wire
from protocols.kafka.admin.topics import find_topic
from protocols.kafka.authorization import Operation, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.alter_partition_reassignments import ALTER_PARTITION_REASSIGNMENTS as API

NO_REASSIGNMENT = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not await check_cluster(ctx, Operation.ALTER):
        return _refused(request, *acl_wire.CLUSTER_AUTHORIZATION_FAILED)
    cluster = ctx.core.cluster
    live = [ctx.broker.settings.node_id] if cluster is None else cluster.serving_ids()
    moves: dict[Bundle, int] = {}
    cancels: dict[Bundle, list[dict]] = {}
    responses = []
    for topic in request.topics:
        info = await find_topic(ctx, topic.name)
        partitions = []
        for asked in topic.partitions:
            answer = {"partition_index": asked.partition_index, "error_code": ErrorCode.NONE, "error_message": None}
            partitions.append(answer)
            exists = info is not None and 0 <= asked.partition_index < info.partitions
            code, message = _check(asked.replicas, exists, live, cluster is not None)
            if code != ErrorCode.NONE or cluster is None:
                answer["error_code"], answer["error_message"] = code, message
                continue
            bundle = partition_bundle(info.name.tenant, info.name.namespace, info.name.topic, asked.partition_index)
            if asked.replicas is None:
                cancels.setdefault(bundle, []).append(answer)
            elif moves.setdefault(bundle, asked.replicas[0]) != asked.replicas[0]:
                answer["error_code"] = ErrorCode.INVALID_REPLICA_ASSIGNMENT
                answer["error_message"] = (f"Partition {asked.partition_index} shares bundle {bundle} with a "
                                           f"partition moved to broker {moves[bundle]} in this request")
        responses.append({"name": topic.name, "partitions": partitions})
    if cluster is not None:
        await cluster.place(moves)
        for bundle in await cluster.cancel_moves(list(cancels)):
            for answer in cancels[bundle]:
                answer["error_code"], answer["error_message"] = NO_REASSIGNMENT
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "responses": responses}


def _refused(request: Msg, code: int, message: str) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": [
        {"name": topic.name, "partitions": [{"partition_index": p.partition_index, "error_code": code,
                                             "error_message": message} for p in topic.partitions]}
        for topic in request.topics]}


def _check(replicas: list[int] | None, exists: bool, live: list[int],
           clustered: bool) -> tuple[ErrorCode, str | None]:
    """The partition's error as Kafka's controller words it; NONE for a valid move, and for a
    cancel that may have a move to cancel (one process never has one)."""
    if replicas is None:
        return (ErrorCode.NONE, None) if clustered and exists else NO_REASSIGNMENT
    if not replicas:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Empty replica list specified in partition reassignment."
    if len(set(replicas)) != len(replicas):
        return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Duplicate replica ids in partition reassignment replica list: {replicas}")
    if any(broker < 0 for broker in replicas):
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Invalid broker id in replica list: {replicas}"
    missing = [broker for broker in replicas if broker not in live]
    if missing:
        return (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Replica assignment has brokers that are not alive. "
                f"Replica list: {missing}, live broker list: {sorted(live)}")
    if not exists:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
    return ErrorCode.NONE, None

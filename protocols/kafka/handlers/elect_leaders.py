"""ElectLeaders (key 43), versions 0-2.

Behaviour: this broker is the only replica and so always the leader, preferred or not: every
existing partition asked for is ELECTION_NOT_NEEDED, an unknown one UNKNOWN_TOPIC_OR_PARTITION
("The partition does not exist."). A null partition list means all partitions, and, as in Kafka,
partitions that needed no election are then left out of the answer (so it is empty). With ACLs
enforced (SASL on), the request needs ALTER on the cluster: without it the answer (v1+) and every
asked partition are CLUSTER_AUTHORIZATION_FAILED (no message), as in Kafka.
Gaps: none known.
"""

from protocols.kafka.admin.topics import find_topic
from protocols.kafka.authorization import Operation, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.elect_leaders import ELECT_LEADERS as API

NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not await check_cluster(ctx, Operation.ALTER):
        return _refused(request)
    results = []
    for asked in request.topic_partitions or ():
        info = await find_topic(ctx, asked.topic)
        partitions = []
        for index in dict.fromkeys(asked.partition_id):
            if info is not None and 0 <= index < info.partitions:
                partitions.append({"partition_id": index, "error_code": ErrorCode.ELECTION_NOT_NEEDED,
                                   "error_message": NOT_NEEDED_MESSAGE})
            else:
                partitions.append({"partition_id": index, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   "error_message": "The partition does not exist."})
        results.append({"topic": asked.topic, "partition_result": partitions})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "replica_election_results": results}


def _refused(request: Msg) -> dict:
    by_topic: dict[str, dict[int, None]] = {}   # Kafka answers the set of asked partitions
    for asked in request.topic_partitions or ():
        by_topic.setdefault(asked.topic, {}).update(dict.fromkeys(asked.partition_id))
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return {"throttle_time_ms": 0, "error_code": code, "replica_election_results": [
        {"topic": topic, "partition_result": [{"partition_id": index, "error_code": code, "error_message": None}
                                              for index in indexes]}
        for topic, indexes in by_topic.items()]}

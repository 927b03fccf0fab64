"""InitProducerId (key 22), versions 0-4.

Behaviour: an idempotent producer (no transactional id) gets a new producer id from a durable
counter, epoch 0. A v3+ request naming its current id and epoch (KIP-360, after a sequence error)
keeps its id with the epoch bumped, which resets its sequences on every partition.
With ACLs enforced (SASL on), as in Kafka 2.8: a transactional id needs WRITE on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer needs IDEMPOTENT_WRITE on the
cluster or, since KIP-679, WRITE on some topic (else CLUSTER_AUTHORIZATION_FAILED).
Gaps: transactions are not served: a transactional id is refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, so a transactional producer fails cleanly at start.
"""

from protocols.kafka.authorization import Operation, ResourceType, authorized_by_resource_type, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.init_producer_id import INIT_PRODUCER_ID as API

MAX_EPOCH = 32767


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if request.transactional_id is not None:
        # Refused whether or not WRITE on the id is allowed (transactions are not served), so the
        # ACL is not consulted: the answer is the same.
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not (await check_cluster(ctx, Operation.IDEMPOTENT_WRITE)
            or await authorized_by_resource_type(ctx, Operation.WRITE, ResourceType.TOPIC)):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    if request.producer_id >= 0 and 0 <= request.producer_epoch < MAX_EPOCH - 1:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": request.producer_id,
                "producer_epoch": request.producer_epoch + 1}
    producer_id = await ctx.core.metadata.next_id("kafka-producer-id")
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0}

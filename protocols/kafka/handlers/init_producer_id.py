"""InitProducerId (key 22), versions 0-4.

Behaviour: an idempotent producer (no transactional id) gets a new producer id from a durable
counter, epoch 0. A v3+ request naming its current id and epoch (KIP-360, after a sequence error)
keeps its id with the epoch bumped, which resets its sequences on every partition.
A transactional producer is served by the transaction coordinator (core/transactions): the first
init of a transactional id takes a new producer id, each later one bumps the epoch (fencing the
previous producer) after aborting a transaction it left open; at the epoch limit a new producer id
is taken. transaction_timeout_ms must be in 1..transaction.max.timeout.ms
(INVALID_TRANSACTION_TIMEOUT); an empty id is INVALID_REQUEST; while the previous transaction is
being completed the answer is CONCURRENT_TRANSACTIONS. v3+ with the current id/epoch (KIP-360)
bumps that epoch; a stale one is fenced (PRODUCER_FENCED from v4, INVALID_PRODUCER_EPOCH before).
With ACLs enforced (SASL on), as in Kafka 2.8: a transactional id needs WRITE on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer needs IDEMPOTENT_WRITE on the
cluster or, since KIP-679, WRITE on some topic (else CLUSTER_AUTHORIZATION_FAILED).
Gaps: none known for 2.8's range.
"""

from core.errors import CoreError
from protocols.kafka.authorization import (Operation, ResourceType, authorized_by_resource_type, check,
                                           check_cluster)
from protocols.kafka.broker import PRODUCER_ID_COUNTER, RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.init_producer_id import INIT_PRODUCER_ID as API
from protocols.kafka.transactions import txn_code, txn_key

MAX_EPOCH = 32767
PRODUCER_FENCED_SINCE = 4


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if request.transactional_id is not None:
        return await _transactional(request, ctx)
    if not (await check_cluster(ctx, Operation.IDEMPOTENT_WRITE, audit=False)
            or await authorized_by_resource_type(ctx, Operation.WRITE, ResourceType.TOPIC)):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    if request.producer_id >= 0 and 0 <= request.producer_epoch < MAX_EPOCH - 1:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": request.producer_id,
                "producer_epoch": request.producer_epoch + 1}
    producer_id = await ctx.core.metadata.next_id(PRODUCER_ID_COUNTER)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0}


async def _transactional(request: Msg, ctx: RequestContext) -> dict:
    if not await check(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    try:
        producer_id, epoch = await ctx.broker.transactions.init_producer_id(
            txn_key(ctx, request.transactional_id), request.transaction_timeout_ms,
            request.producer_id, request.producer_epoch)
    except CoreError as exc:
        return {"throttle_time_ms": 0, "error_code": txn_code(exc, ctx.version, PRODUCER_FENCED_SINCE)}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": epoch}

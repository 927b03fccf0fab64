"""AddOffsetsToTxn (key 25), versions 0-3.

Behaviour: adds a consumer group to the producer's ongoing transaction (starting one if none is),
so that its TxnOffsetCommit offsets are applied to the group when the transaction commits and
dropped when it aborts. Errors as AddPartitionsToTxn: INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED
(v2+; before, INVALID_PRODUCER_EPOCH), CONCURRENT_TRANSACTIONS.
With ACLs enforced (SASL on): WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
and READ on the group (GROUP_AUTHORIZATION_FAILED), as in Kafka 2.8.
Gaps: none known for 2.8's range.
"""

from core.errors import CoreError
from protocols.kafka.authorization import Operation, ResourceType, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.add_offsets_to_txn import ADD_OFFSETS_TO_TXN as API
from protocols.kafka.transactions import txn_code, txn_key

PRODUCER_FENCED_SINCE = 2


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not await check(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not await check(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    try:
        await ctx.broker.transactions.add_offsets(txn_key(ctx, request.transactional_id), request.producer_id,
                                                  request.producer_epoch, request.group_id)
    except CoreError as exc:
        return {"throttle_time_ms": 0, "error_code": txn_code(exc, ctx.version, PRODUCER_FENCED_SINCE)}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE}

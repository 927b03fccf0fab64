"""EndTxn (key 26), versions 0-3.

Behaviour: commits or aborts the producer's ongoing transaction. The decision is stored, a COMMIT or
ABORT marker (core/transactions/markers.py) is appended to every partition of the transaction, and
on commit the offsets staged by TxnOffsetCommit are written to their groups; the answer comes once
all of that is durable. A retried EndTxn of a transaction that already ended the same way succeeds;
ending one that is not ongoing (or ended the other way) is INVALID_TXN_STATE; while it is being
completed CONCURRENT_TRANSACTIONS; INVALID_PRODUCER_ID_MAPPING and PRODUCER_FENCED (v2+; before,
INVALID_PRODUCER_EPOCH) as for AddPartitionsToTxn.
With ACLs enforced (SASL on): WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
Gaps: none known for 2.8's range.
"""

from core.errors import CoreError
from protocols.kafka.authorization import Operation, ResourceType, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.end_txn import END_TXN as API
from protocols.kafka.transactions import txn_code, txn_key

PRODUCER_FENCED_SINCE = 2


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not await check(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    try:
        await ctx.broker.transactions.end(txn_key(ctx, request.transactional_id), request.producer_id,
                                          request.producer_epoch, bool(request.committed))
    except CoreError as exc:
        return {"throttle_time_ms": 0, "error_code": txn_code(exc, ctx.version, PRODUCER_FENCED_SINCE)}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE}

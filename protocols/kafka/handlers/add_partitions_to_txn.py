"""AddPartitionsToTxn (key 24), versions 0-3.

Behaviour: adds partitions to the producer's ongoing transaction (starting one if none is), durable
before the answer; the transactional producer may then write to them. As in Kafka, if any partition
is refused (TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION) none is added and the others get
OPERATION_NOT_ATTEMPTED. Then, for all partitions alike: an unknown transactional id or another
producer id is INVALID_PRODUCER_ID_MAPPING, an older epoch PRODUCER_FENCED (v2+; before,
INVALID_PRODUCER_EPOCH), a transaction being completed CONCURRENT_TRANSACTIONS.
With ACLs enforced (SASL on): WRITE on the transactional id (else every partition is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and WRITE on each topic, as in Kafka 2.8.
Gaps: v4+ (brokers verifying for each other, KIP-890) is not served.
"""

from core.errors import CoreError
from protocols.kafka.authorization import Operation, ResourceType, authorized_names, check, enforced
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.add_partitions_to_txn import ADD_PARTITIONS_TO_TXN as API
from protocols.kafka.transactions import partition_exists, txn_code, txn_key

PRODUCER_FENCED_SINCE = 2


async def handle(request: Msg, ctx: RequestContext) -> dict:
    wanted = [(topic.name, index) for topic in request.topics for index in topic.partitions]
    if not await check(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return _response(request, {tp: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in wanted})
    writable = await authorized_names(ctx, Operation.WRITE, ResourceType.TOPIC,
                                      (t.name for t in request.topics)) if enforced(ctx) else None
    refused: dict[tuple[str, int], ErrorCode] = {}
    for topic, index in wanted:
        if writable is not None and topic not in writable:
            refused[(topic, index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif not await partition_exists(ctx, topic, index):
            refused[(topic, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if refused:
        return _response(request, {tp: refused.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted})
    try:
        await ctx.broker.transactions.add_partitions(txn_key(ctx, request.transactional_id), request.producer_id,
                                                     request.producer_epoch, wanted)
        code = ErrorCode.NONE
    except CoreError as exc:
        code = txn_code(exc, ctx.version, PRODUCER_FENCED_SINCE)
    return _response(request, {tp: code for tp in wanted})


def _response(request: Msg, codes: dict[tuple[str, int], ErrorCode]) -> dict:
    return {"throttle_time_ms": 0, "results": [
        {"name": topic.name, "results": [{"partition_index": index, "error_code": codes[(topic.name, index)]}
                                         for index in topic.partitions]}
        for topic in request.topics]}

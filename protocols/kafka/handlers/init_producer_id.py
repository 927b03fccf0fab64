"""InitProducerId (key 22), versions 0-4.

Behaviour: an idempotent producer (no transactional id) gets a new producer id from a durable
counter, epoch 0. A v3+ request naming its current id and epoch (KIP-360, after a sequence error)
keeps its id with the epoch bumped, which resets its sequences on every partition.
Gaps: transactions are not served: a transactional id is refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, so a transactional producer fails cleanly at start.
"""

from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.init_producer_id import INIT_PRODUCER_ID as API

MAX_EPOCH = 32767


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if request.transactional_id is not None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if request.producer_id >= 0 and 0 <= request.producer_epoch < MAX_EPOCH - 1:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": request.producer_id,
                "producer_epoch": request.producer_epoch + 1}
    producer_id = await ctx.core.metadata.next_id("kafka-producer-id")
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0}

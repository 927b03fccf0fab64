"""ListPartitionReassignments (key 46), version 0.

Behaviour: no reassignment is ever in progress on a single broker, so the answer lists none,
whatever partitions are asked about (Kafka too lists only partitions being reassigned).
Gaps: none known.
"""

from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.list_partition_reassignments import LIST_PARTITION_REASSIGNMENTS as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "topics": []}

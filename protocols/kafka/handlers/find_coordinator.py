"""FindCoordinator (key 10), versions 0-3.

Behaviour: a group (key_type 0) or transactional id (key_type 1) is coordinated by the owner of its
bundle (one process: this broker); while that bundle has no live owner the answer is
COORDINATOR_NOT_AVAILABLE, so the client asks again. A group key creates the namespace's
__consumer_offsets topic if need be (protocols/kafka/consumer_offsets.py), as Kafka does. Another
key_type is INVALID_REQUEST, as in Kafka. With ACLs enforced (SASL on), a group key needs DESCRIBE on
the group (GROUP_AUTHORIZATION_FAILED), a transactional id DESCRIBE on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), as in Kafka 2.8.
Gaps: none for 2.8's range (batched keys are v4).
"""

from core.cluster.bundles import group_bundle, transaction_bundle
from core.errors import CoreError
from protocols.kafka.authorization import Operation, ResourceType, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.cluster_view import coordinator
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.find_coordinator import FIND_COORDINATOR as API

GROUP, TRANSACTION = 0, 1
# What each key type needs DESCRIBE on, and Kafka's answer (code, default message) without it.
_REFUSALS = {
    GROUP: (ResourceType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."),
    TRANSACTION: (ResourceType.TRANSACTIONAL_ID, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                  "Transactional Id authorization failed."),
}


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if request.key_type in _REFUSALS:
        resource_type, code, message = _REFUSALS[request.key_type]
        if not await check(ctx, Operation.DESCRIBE, resource_type, request.key):
            return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
                    "node_id": -1, "host": "", "port": -1}
    if request.key_type not in (GROUP, TRANSACTION):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST,
                "error_message": f"unknown coordinator key type {request.key_type}",
                "node_id": -1, "host": "", "port": -1}
    if request.key_type == GROUP:
        try:
            await ctx.broker.consumer_offsets.ensure_topic(ctx.tenant, ctx.namespace)
        except CoreError as exc:   # as Kafka while it cannot create its offsets topic
            return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    "error_message": str(exc), "node_id": -1, "host": "", "port": -1}
    bundle_of = group_bundle if request.key_type == GROUP else transaction_bundle
    node = coordinator(ctx, bundle_of(ctx.tenant, ctx.namespace, request.key))
    if node is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                "error_message": "the coordinator is moving to another broker", "node_id": -1, "host": "", "port": -1}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "node_id": node.node_id, "host": node.host, "port": node.port}

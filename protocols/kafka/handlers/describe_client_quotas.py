"""DescribeClientQuotas (key 48), versions 0-1.

Behaviour: the stored quotas (core/quotas.py) whose entity matches every filter component: match
type 0 an exact name, 1 the type's default, 2 any name but the default; with `strict`, entities
of other types too are excluded. Entity types are "user" and "client-id"; another type, or one
named twice, is INVALID_REQUEST as in Kafka. With ACLs enforced (SASL on) the request needs
DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
Gaps: "ip" entities (connection_creation_rate) are not served.
"""

from core.quotas import ENTITY_TYPES, QuotaEntry
from protocols.kafka.authorization import Operation, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.describe_client_quotas import DESCRIBE_CLIENT_QUOTAS as API

EXACT, DEFAULT, SPECIFIED = 0, 1, 2


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not await check_cluster(ctx, Operation.DESCRIBE_CONFIGS):
        return _answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", None)
    components = {}
    for component in request.components:
        if component.entity_type not in ENTITY_TYPES:
            return _answer(ErrorCode.INVALID_REQUEST, f"Custom entity type '{component.entity_type}' not supported", None)
        if component.entity_type in components:
            return _answer(ErrorCode.INVALID_REQUEST, f"Duplicate filter component entity type {component.entity_type}", None)
        if component.match_type not in (EXACT, DEFAULT, SPECIFIED):
            return _answer(ErrorCode.INVALID_REQUEST, f"Unknown match type {component.match_type}", None)
        components[component.entity_type] = component
    entries = [entry for entry in await ctx.broker.quotas.entries() if _matches(entry, components, request.strict)]
    return _answer(ErrorCode.NONE, None, [
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in entry.entity.items()],
         "values": [{"key": k, "value": v} for k, v in sorted(entry.values.items())]}
        for entry in entries])


def _matches(entry: QuotaEntry, components: dict[str, Msg], strict: bool) -> bool:
    if strict and set(entry.entity) != set(components):
        return False
    for entity_type, component in components.items():
        if entity_type not in entry.entity:
            return False
        name = entry.entity[entity_type]
        if component.match_type == EXACT and name != component.match:
            return False
        if component.match_type == DEFAULT and name is not None:
            return False
        if component.match_type == SPECIFIED and name is None:
            return False
    return True


def _answer(error_code: int, message: str | None, entries: list[dict] | None) -> dict:
    return {"throttle_time_ms": 0, "error_code": error_code, "error_message": message, "entries": entries}

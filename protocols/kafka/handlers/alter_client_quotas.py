"""AlterClientQuotas (key 49), versions 0-1.

Behaviour: sets or removes quota values of user / client-id entities (a null name: the type's
default), each entry validated before anything of it is stored, or only validated. Enforced keys:
producer_byte_rate (bytes of Produce requests) and consumer_byte_rate (bytes of Fetch responses),
throttling as Kafka does (core/quotas.py, protocols/kafka/throttle.py). Errors, per entry, as
Kafka: an unknown entity type, an empty entity or a name given twice INVALID_REQUEST; an unknown
key or a value that is not positive INVALID_REQUEST. With ACLs enforced (SASL on) the request
needs ALTER_CONFIGS on the cluster, else every entry is CLUSTER_AUTHORIZATION_FAILED.
Gaps: request_percentage, controller_mutation_rate and "ip" entities (connection_creation_rate)
are refused (INVALID_REQUEST), not enforced.
"""

from core.errors import InvalidArgument
from core.quotas import check_entity, check_value
from protocols.kafka.authorization import Operation, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.alter_client_quotas import ALTER_CLIENT_QUOTAS as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    allowed = await check_cluster(ctx, Operation.ALTER_CONFIGS)
    results = []
    for entry in request.entries:
        entity_out = [{"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity]
        if not allowed:
            results.append(_result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", entity_out))
            continue
        try:
            entity = _entity(entry)
            changes = {op.key: None if op.remove else op.value for op in entry.ops}
            if len(changes) != len(entry.ops):
                raise InvalidArgument("Duplicate quota key in one entry")
            check_entity(entity)
            for key, value in changes.items():
                if value is not None:
                    check_value(key, value)
            if not request.validate_only:
                await ctx.broker.quotas.alter(entity, changes)
        except InvalidArgument as exc:
            results.append(_result(ErrorCode.INVALID_REQUEST, str(exc), entity_out))
            continue
        results.append(_result(ErrorCode.NONE, None, entity_out))
    return {"throttle_time_ms": 0, "entries": results}


def _entity(entry: Msg) -> dict[str, str | None]:
    entity: dict[str, str | None] = {}
    for part in entry.entity:
        if part.entity_type in entity:
            raise InvalidArgument(f"Duplicate entity type {part.entity_type}")
        entity[part.entity_type] = part.entity_name
    return entity


def _result(error_code: int, message: str | None, entity: list[dict]) -> dict:
    return {"error_code": error_code, "error_message": message, "entity": entity}

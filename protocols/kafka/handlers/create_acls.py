"""CreateAcls (key 30), versions 0-2.

Behaviour: stores each creation in the client's tenant (core/acl.py), one result per creation, in
Kafka 2.8's order of checks:
  - a creation holding Kafka's UNKNOWN code (0) closes the connection (Kafka's request parser);
  - without ALTER on CLUSTER (only when ACLs are enforced, i.e. SASL on) every result is
    CLUSTER_AUTHORIZATION_FAILED;
  - a creation with an ANY or MATCH value cannot be a binding: Kafka fails the whole request, so
    every result is UNKNOWN_SERVER_ERROR (no message);
  - a CLUSTER resource not named "kafka-cluster", or an empty resource name: INVALID_REQUEST with
    Kafka's message;
  - an unknown (non-zero) code, or a "/" in the resource name: INVALID_REQUEST "Failed to create ACL";
  - a principal without "Type:" fails every creation of the same resource pattern in the request
    with UNKNOWN_SERVER_ERROR, as Kafka's authorizer does.
Creating an ACL that exists already succeeds (ACLs are a set). v0 creations are LITERAL.
With SASL off ACLs are stored but not enforced (protocols/kafka/authorization.py).
Gaps: none known for 2.8's range.
"""

from core.acl import CLUSTER_NAME, AclBinding, Operation, PatternType, Permission, ResourceType
from core.errors import CoreError, InvalidAcl
from protocols.kafka import acl_wire
from protocols.kafka.authorization import audit_change, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.create_acls import CREATE_ACLS as API

# Values Kafka's ResourcePattern / AccessControlEntry constructors refuse (IllegalArgumentException).
_NOT_A_BINDING = (ResourceType.ANY, PatternType.ANY, PatternType.MATCH, Operation.ANY, Permission.ANY)


async def handle(request: Msg, ctx: RequestContext) -> dict:
    creations = request.creations
    acl_wire.refuse_unknown_codes(API.name, [(c.resource_type, c.resource_pattern_type, c.operation,
                                              c.permission_type) for c in creations])
    if not await check_cluster(ctx, Operation.ALTER):
        return _all_failed(len(creations), *acl_wire.CLUSTER_AUTHORIZATION_FAILED)
    bindings = [AclBinding.of(acl_wire.resource_type(c.resource_type), c.resource_name,
                              acl_wire.pattern_type(c.resource_pattern_type), c.principal, c.host,
                              acl_wire.operation(c.operation), acl_wire.permission(c.permission_type))
                for c in creations]
    if any(value in _NOT_A_BINDING for b in bindings for value in _values(b)):
        return _all_failed(len(creations), ErrorCode.UNKNOWN_SERVER_ERROR, None)

    results: list[CoreError | None] = [None] * len(bindings)
    valid: list[int] = []
    for index, binding in enumerate(bindings):
        if binding.pattern.resource_type is ResourceType.CLUSTER and binding.pattern.name != CLUSTER_NAME:
            results[index] = InvalidAcl(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        elif not binding.pattern.name:
            results[index] = InvalidAcl("Invalid empty resource name")
        else:
            valid.append(index)
    stored = await ctx.broker.authorizer.create_acls(ctx.tenant, [bindings[i] for i in valid])
    for index, result in zip(valid, stored):
        results[index] = result
    created = [bindings[index].to_doc() for index, result in zip(valid, stored) if result is None]
    if created:
        audit_change(ctx, "kafka CreateAcls", f"acls of tenant {ctx.tenant}", None, created)
    answers = []
    for result in results:
        error, message = acl_wire.error_fields(result)
        answers.append({"error_code": error, "error_message": message})
    return {"throttle_time_ms": 0, "results": answers}


def _values(binding: AclBinding) -> tuple:
    return (binding.pattern.resource_type, binding.pattern.pattern_type, binding.entry.operation,
            binding.entry.permission)


def _all_failed(count: int, error: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "results": [{"error_code": error, "error_message": message}] * count}

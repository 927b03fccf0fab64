"""DeleteAcls (key 31), versions 0-2.

Behaviour: for each filter, in order, deletes the client's tenant's ACLs it matches (Kafka's filter
semantics, as DescribeAcls) and lists them in its result; an ACL several filters match is listed
under the first of them only, as Kafka does. A failed deletion is reported on the ACL itself.
v0 filters are LITERAL. A filter holding Kafka's UNKNOWN code (0) closes the connection, as
Kafka's request parser does. Needs ALTER on CLUSTER when ACLs are enforced (SASL on), else every
filter answers CLUSTER_AUTHORIZATION_FAILED; with SASL off it is always allowed
(protocols/kafka/authorization.py).
Gaps: none known for 2.8's range.
"""

from core.acl import Operation
from protocols.kafka import acl_wire
from protocols.kafka.authorization import audit_change, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.delete_acls import DELETE_ACLS as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    filters = request.filters
    acl_wire.refuse_unknown_codes(API.name, [(f.resource_type_filter, f.pattern_type_filter, f.operation,
                                              f.permission_type) for f in filters])
    if not await check_cluster(ctx, Operation.ALTER):
        error, message = acl_wire.CLUSTER_AUTHORIZATION_FAILED
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": error, "error_message": message, "matching_acls": []} for _ in filters]}
    acl_filters = [acl_wire.binding_filter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                           f.principal_filter, f.host_filter, f.operation, f.permission_type)
                   for f in filters]
    deleted = await ctx.broker.authorizer.delete_acls(ctx.tenant, acl_filters)
    gone = [d.binding.to_doc() for deletions in deleted for d in deletions if d.error is None]
    if gone:
        audit_change(ctx, "kafka DeleteAcls", f"acls of tenant {ctx.tenant}", gone, None)
    results = []
    for deletions in deleted:
        matching = []
        for deletion in deletions:
            error, message = acl_wire.error_fields(deletion.error)
            pattern = deletion.binding.pattern
            matching.append({"error_code": error, "error_message": message,
                             "resource_type": acl_wire.code(pattern.resource_type), "resource_name": pattern.name,
                             "pattern_type": acl_wire.code(pattern.pattern_type),
                             **acl_wire.binding_fields(deletion.binding)})
        results.append({"error_code": ErrorCode.NONE, "error_message": None, "matching_acls": matching})
    return {"throttle_time_ms": 0, "filter_results": results}

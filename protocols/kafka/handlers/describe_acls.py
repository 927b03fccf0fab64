"""DescribeAcls (key 29), versions 0-2.

Behaviour: the ACLs of the client's tenant that the filter matches, grouped by resource pattern
(patterns in order of their first ACL, ACLs in creation order), with Kafka's filter semantics
(pattern type ANY: exact name, any type; MATCH: every literal, "*" and prefixed pattern that
applies to the name; null strings match anything). v0 has no pattern type: its filter is LITERAL,
so only literal ACLs are returned. Needs DESCRIBE on CLUSTER when ACLs are enforced (SASL on),
else CLUSTER_AUTHORIZATION_FAILED; with SASL off it is always allowed (protocols/kafka/authorization.py).
A filter holding Kafka's UNKNOWN code (0) closes the connection, as Kafka's request parser does;
other unknown codes match nothing.
After the stored bindings come those the grants of the client's namespace amount to
(protocols/kafka/grant_acls.py), so a Kafka admin client sees what a grant lets a user do.
Gaps: none known for 2.8's range (Kafka without an authorizer answers SECURITY_DISABLED; this
gateway always has one).
"""

from core.acl import Operation
from protocols.kafka import acl_wire
from protocols.kafka.authorization import check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.grant_acls import grant_bindings
from protocols.kafka.schema.describe_acls import DESCRIBE_ACLS as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    acl_wire.refuse_unknown_codes(API.name, [(request.resource_type_filter, request.pattern_type_filter,
                                              request.operation, request.permission_type)])
    if not await check_cluster(ctx, Operation.DESCRIBE):
        error, message = acl_wire.CLUSTER_AUTHORIZATION_FAILED
        return {"throttle_time_ms": 0, "error_code": error, "error_message": message, "resources": []}
    acl_filter = acl_wire.binding_filter(request.resource_type_filter, request.resource_name_filter,
                                         request.pattern_type_filter, request.principal_filter,
                                         request.host_filter, request.operation, request.permission_type)
    resources: dict = {}
    granted = [b for b in await grant_bindings(ctx.core, ctx.tenant, ctx.namespace) if acl_filter.matches(b)]
    for binding in await ctx.broker.authorizer.acls(ctx.tenant, acl_filter) + granted:
        pattern = binding.pattern
        resource = resources.get(pattern)
        if resource is None:
            resource = resources[pattern] = {
                "resource_type": acl_wire.code(pattern.resource_type), "resource_name": pattern.name,
                "pattern_type": acl_wire.code(pattern.pattern_type), "acls": []}
        resource["acls"].append(acl_wire.binding_fields(binding))
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "resources": list(resources.values())}

"""DescribeGroups (key 15), versions 0-5 (flexible from 5)."""

from protocols.kafka.codec.declare import ARRAY, BOOL, BYTES, INT16, INT32, STRING, F, api

DESCRIBE_GROUPS = api(15, "DescribeGroups", (0, 5), flexible="5+", request=[
    F("groups", ARRAY(STRING)),
    F("include_authorized_operations", BOOL, "3+"),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("groups", ARRAY([
        F("error_code", INT16),
        F("group_id", STRING),
        F("group_state", STRING),
        F("protocol_type", STRING),
        F("protocol_data", STRING),
        F("members", ARRAY([
            F("member_id", STRING),
            F("group_instance_id", STRING, "4+", nullable="4+", default=None),
            F("client_id", STRING),
            F("client_host", STRING),
            F("member_metadata", BYTES),
            F("member_assignment", BYTES),
        ])),
        F("authorized_operations", INT32, "3+", default=-2147483648),
    ])),
])

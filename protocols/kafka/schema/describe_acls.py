"""DescribeAcls (key 29), versions 0-2 (flexible from 2). Version 1 adds the pattern type."""

from protocols.kafka.codec.declare import ARRAY, INT8, INT16, INT32, STRING, F, api

LITERAL = 3

DESCRIBE_ACLS = api(29, "DescribeAcls", (0, 2), flexible="2+", request=[
    F("resource_type_filter", INT8),
    F("resource_name_filter", STRING, nullable="0+"),
    F("pattern_type_filter", INT8, "1+", default=LITERAL),
    F("principal_filter", STRING, nullable="0+"),
    F("host_filter", STRING, nullable="0+"),
    F("operation", INT8),
    F("permission_type", INT8),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F("resources", ARRAY([
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("pattern_type", INT8, "1+", default=LITERAL),
        F("acls", ARRAY([
            F("principal", STRING),
            F("host", STRING),
            F("operation", INT8),
            F("permission_type", INT8),
        ])),
    ])),
])

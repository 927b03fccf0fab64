"""CreateAcls (key 30), versions 0-2 (flexible from 2). Version 1 adds the pattern type."""

from protocols.kafka.codec.declare import ARRAY, INT8, INT16, INT32, STRING, F, api

LITERAL = 3

CREATE_ACLS = api(30, "CreateAcls", (0, 2), flexible="2+", request=[
    F("creations", ARRAY([
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("resource_pattern_type", INT8, "1+", default=LITERAL),
        F("principal", STRING),
        F("host", STRING),
        F("operation", INT8),
        F("permission_type", INT8),
    ])),
], response=[
    F("throttle_time_ms", INT32),
    F("results", ARRAY([
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
    ])),
])

"""AlterConfigs (key 33), versions 0-2 (flexible from 2)."""

from protocols.kafka.codec.declare import ARRAY, BOOL, INT8, INT16, INT32, STRING, F, api

ALTER_CONFIGS = api(33, "AlterConfigs", (0, 2), flexible="2+", request=[
    F("resources", ARRAY([
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("configs", ARRAY([
            F("name", STRING),
            F("value", STRING, nullable="0+"),
        ])),
    ])),
    F("validate_only", BOOL),
], response=[
    F("throttle_time_ms", INT32),
    F("responses", ARRAY([
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
        F("resource_type", INT8),
        F("resource_name", STRING),
    ])),
])

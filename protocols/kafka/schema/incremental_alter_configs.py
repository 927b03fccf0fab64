"""IncrementalAlterConfigs (key 44), versions 0-1 (flexible from 1)."""

from protocols.kafka.codec.declare import ARRAY, BOOL, INT8, INT16, INT32, STRING, F, api

INCREMENTAL_ALTER_CONFIGS = api(44, "IncrementalAlterConfigs", (0, 1), flexible="1+", request=[
    F("resources", ARRAY([
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("configs", ARRAY([
            F("name", STRING),
            F("config_operation", INT8),
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

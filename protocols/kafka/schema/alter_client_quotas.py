"""AlterClientQuotas (key 49), versions 0-1 (flexible from 1)."""

from protocols.kafka.codec.declare import ARRAY, BOOL, FLOAT64, INT16, INT32, STRING, F, api

ALTER_CLIENT_QUOTAS = api(49, "AlterClientQuotas", (0, 1), flexible="1+", request=[
    F("entries", ARRAY([
        F("entity", ARRAY([
            F("entity_type", STRING),
            F("entity_name", STRING, nullable="0+"),
        ])),
        F("ops", ARRAY([
            F("key", STRING),
            F("value", FLOAT64),
            F("remove", BOOL),
        ])),
    ])),
    F("validate_only", BOOL),
], response=[
    F("throttle_time_ms", INT32),
    F("entries", ARRAY([
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
        F("entity", ARRAY([
            F("entity_type", STRING),
            F("entity_name", STRING, nullable="0+"),
        ])),
    ])),
])

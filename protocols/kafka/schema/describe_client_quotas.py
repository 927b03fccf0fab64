"""DescribeClientQuotas (key 48), versions 0-1 (flexible from 1)."""

from protocols.kafka.codec.declare import ARRAY, BOOL, FLOAT64, INT8, INT16, INT32, STRING, F, api

DESCRIBE_CLIENT_QUOTAS = api(48, "DescribeClientQuotas", (0, 1), flexible="1+", request=[
    F("components", ARRAY([
        F("entity_type", STRING),
        F("match_type", INT8),
        F("match", STRING, nullable="0+"),
    ])),
    F("strict", BOOL),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F("entries", ARRAY([
        F("entity", ARRAY([
            F("entity_type", STRING),
            F("entity_name", STRING, nullable="0+"),
        ])),
        F("values", ARRAY([
            F("key", STRING),
            F("value", FLOAT64),
        ])),
    ]), nullable="0+"),
])

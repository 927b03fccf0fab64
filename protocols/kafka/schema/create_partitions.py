"""CreatePartitions (key 37), versions 0-3 (flexible from 2)."""

from protocols.kafka.codec.declare import ARRAY, BOOL, INT16, INT32, STRING, F, api

CREATE_PARTITIONS = api(37, "CreatePartitions", (0, 3), flexible="2+", request=[
    F("topics", ARRAY([
        F("name", STRING),
        F("count", INT32),
        F("assignments", ARRAY([
            F("broker_ids", ARRAY(INT32)),
        ]), nullable="0+"),
    ])),
    F("timeout_ms", INT32),
    F("validate_only", BOOL),
], response=[
    F("throttle_time_ms", INT32),
    F("results", ARRAY([
        F("name", STRING),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
    ])),
])

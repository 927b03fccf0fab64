"""OffsetDelete (key 47), version 0."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, STRING, F, api

OFFSET_DELETE = api(47, "OffsetDelete", (0, 0), request=[
    F("group_id", STRING),
    F("topics", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
        ])),
    ])),
], response=[
    F("error_code", INT16),
    F("throttle_time_ms", INT32),
    F("topics", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("error_code", INT16),
        ])),
    ])),
])

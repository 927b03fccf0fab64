"""AlterPartitionReassignments (key 45), version 0 (flexible)."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, STRING, F, api

ALTER_PARTITION_REASSIGNMENTS = api(45, "AlterPartitionReassignments", (0, 0), flexible="0+", request=[
    F("timeout_ms", INT32, default=60000),
    F("topics", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("replicas", ARRAY(INT32), nullable="0+", default=None),
        ])),
    ])),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F("responses", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
        ])),
    ])),
])

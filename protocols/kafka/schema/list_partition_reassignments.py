"""ListPartitionReassignments (key 46), version 0 (flexible)."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, STRING, F, api

LIST_PARTITION_REASSIGNMENTS = api(46, "ListPartitionReassignments", (0, 0), flexible="0+", request=[
    F("timeout_ms", INT32, default=60000),
    F("topics", ARRAY([
        F("name", STRING),
        F("partition_indexes", ARRAY(INT32)),
    ]), nullable="0+", default=None),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F("topics", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("replicas", ARRAY(INT32)),
            F("adding_replicas", ARRAY(INT32)),
            F("removing_replicas", ARRAY(INT32)),
        ])),
    ])),
])

"""AlterReplicaLogDirs (key 34), versions 0-2 (flexible from 2)."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, STRING, F, api

ALTER_REPLICA_LOG_DIRS = api(34, "AlterReplicaLogDirs", (0, 2), flexible="2+", request=[
    F("dirs", ARRAY([
        F("path", STRING),
        F("topics", ARRAY([
            F("name", STRING),
            F("partitions", ARRAY(INT32)),
        ])),
    ])),
], response=[
    F("throttle_time_ms", INT32),
    F("results", ARRAY([
        F("topic_name", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("error_code", INT16),
        ])),
    ])),
])

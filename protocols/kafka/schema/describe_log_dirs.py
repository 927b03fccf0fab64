"""DescribeLogDirs (key 35), versions 0-2 (flexible from 2)."""

from protocols.kafka.codec.declare import ARRAY, BOOL, INT16, INT32, INT64, STRING, F, api

DESCRIBE_LOG_DIRS = api(35, "DescribeLogDirs", (0, 2), flexible="2+", request=[
    F("topics", ARRAY([
        F("topic", STRING),
        F("partition_index", ARRAY(INT32)),
    ]), nullable="0+"),
], response=[
    F("throttle_time_ms", INT32),
    F("results", ARRAY([
        F("error_code", INT16),
        F("log_dir", STRING),
        F("topics", ARRAY([
            F("name", STRING),
            F("partitions", ARRAY([
                F("partition_index", INT32),
                F("partition_size", INT64),
                F("offset_lag", INT64),
                F("is_future_key", BOOL),
            ])),
        ])),
    ])),
])

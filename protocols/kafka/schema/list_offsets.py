"""ListOffsets (key 2), versions 0-7 (flexible from 6; v7 only announces MAX_TIMESTAMP, -3)."""

from protocols.kafka.codec.declare import ARRAY, INT8, INT16, INT32, INT64, STRING, F, api

LIST_OFFSETS = api(2, "ListOffsets", (0, 7), flexible="6+", request=[
    F("replica_id", INT32),
    F("isolation_level", INT8, "2+"),
    F("topics", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("current_leader_epoch", INT32, "4+", default=-1),
            F("timestamp", INT64),
            F("max_num_offsets", INT32, "0", default=1),
        ])),
    ])),
], response=[
    F("throttle_time_ms", INT32, "2+"),
    F("topics", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("error_code", INT16),
            F("old_style_offsets", ARRAY(INT64), "0"),
            F("timestamp", INT64, "1+", default=-1),
            F("offset", INT64, "1+", default=-1),
            F("leader_epoch", INT32, "4+", default=-1),
        ])),
    ])),
])

"""OffsetFetch (key 9), versions 0-7 (flexible from 6)."""

from protocols.kafka.codec.declare import ARRAY, BOOL, INT16, INT32, INT64, STRING, F, api

OFFSET_FETCH = api(9, "OffsetFetch", (0, 7), flexible="6+", request=[
    F("group_id", STRING),
    F("topics", ARRAY([
        F("name", STRING),
        F("partition_indexes", ARRAY(INT32)),
    ]), nullable="2+"),
    F("require_stable", BOOL, "7+"),
], response=[
    F("throttle_time_ms", INT32, "3+"),
    F("topics", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("committed_offset", INT64, default=-1),
            F("committed_leader_epoch", INT32, "5+", default=-1),
            F("metadata", STRING, nullable="0+", default=""),
            F("error_code", INT16),
        ])),
    ])),
    F("error_code", INT16, "2+"),
])

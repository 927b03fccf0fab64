"""OffsetCommit (key 8), versions 0-9 (flexible from 8; v9, for consumer-protocol groups, is v8's layout)."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, INT64, STRING, F, api

OFFSET_COMMIT = api(8, "OffsetCommit", (0, 9), flexible="8+", request=[
    F("group_id", STRING),
    F("generation_id", INT32, "1+", default=-1),
    F("member_id", STRING, "1+"),
    F("group_instance_id", STRING, "7+", nullable="7+", default=None),
    F("retention_time_ms", INT64, "2-4", default=-1),
    F("topics", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("committed_offset", INT64),
            F("committed_leader_epoch", INT32, "6+", default=-1),
            F("commit_timestamp", INT64, "1", default=-1),
            F("committed_metadata", STRING, nullable="0+"),
        ])),
    ])),
], response=[
    F("throttle_time_ms", INT32, "3+"),
    F("topics", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("error_code", INT16),
        ])),
    ])),
])

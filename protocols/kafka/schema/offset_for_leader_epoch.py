"""OffsetForLeaderEpoch (key 23), versions 0-4 (flexible from 4)."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, INT64, STRING, F, api

OFFSET_FOR_LEADER_EPOCH = api(23, "OffsetForLeaderEpoch", (0, 4), flexible="4+", request=[
    F("replica_id", INT32, "3+", default=-2),
    F("topics", ARRAY([
        F("topic", STRING),
        F("partitions", ARRAY([
            F("partition", INT32),
            F("current_leader_epoch", INT32, "2+", default=-1),
            F("leader_epoch", INT32),
        ])),
    ])),
], response=[
    F("throttle_time_ms", INT32, "2+"),
    F("topics", ARRAY([
        F("topic", STRING),
        F("partitions", ARRAY([
            F("error_code", INT16),
            F("partition", INT32),
            F("leader_epoch", INT32, "1+", default=-1),
            F("end_offset", INT64, default=-1),
        ])),
    ])),
])

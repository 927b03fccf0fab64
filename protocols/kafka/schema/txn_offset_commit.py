"""TxnOffsetCommit (key 28), versions 0-3 (flexible from 3)."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, INT64, STRING, F, api

TXN_OFFSET_COMMIT = api(28, "TxnOffsetCommit", (0, 3), flexible="3+", request=[
    F("transactional_id", STRING),
    F("group_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("generation_id", INT32, "3+", default=-1),
    F("member_id", STRING, "3+", default=""),
    F("group_instance_id", STRING, "3+", nullable="3+", default=None),
    F("topics", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("committed_offset", INT64),
            F("committed_leader_epoch", INT32, "2+", default=-1),
            F("committed_metadata", STRING, nullable="0+"),
        ])),
    ])),
], response=[
    F("throttle_time_ms", INT32),
    F("topics", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("error_code", INT16),
        ])),
    ])),
])

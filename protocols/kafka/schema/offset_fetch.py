"""OffsetFetch (key 9), versions 0-9 (flexible from 6). v8 asks for several groups at once (KIP-709);
v9 names the asking member of a consumer-protocol group (KIP-848)."""

from protocols.kafka.codec.declare import ARRAY, BOOL, INT16, INT32, INT64, STRING, F, api

_PARTITION = [
    F("partition_index", INT32),
    F("committed_offset", INT64, default=-1),
    F("committed_leader_epoch", INT32, "5+", default=-1),
    F("metadata", STRING, nullable="0+", default=""),
    F("error_code", INT16),
]

OFFSET_FETCH = api(9, "OffsetFetch", (0, 9), flexible="6+", request=[
    F("group_id", STRING, "0-7"),
    F("topics", ARRAY([
        F("name", STRING),
        F("partition_indexes", ARRAY(INT32)),
    ]), "0-7", nullable="2-7"),
    F("groups", ARRAY([
        F("group_id", STRING),
        F("member_id", STRING, "9+", nullable="9+", default=None),
        F("member_epoch", INT32, "9+", default=-1),
        F("topics", ARRAY([
            F("name", STRING),
            F("partition_indexes", ARRAY(INT32)),
        ]), nullable="8+"),
    ]), "8+"),
    F("require_stable", BOOL, "7+"),
], response=[
    F("throttle_time_ms", INT32, "3+"),
    F("topics", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY(_PARTITION)),
    ]), "0-7"),
    F("error_code", INT16, "2-7"),
    F("groups", ARRAY([
        F("group_id", STRING),
        F("topics", ARRAY([
            F("name", STRING),
            F("partitions", ARRAY(_PARTITION)),
        ])),
        F("error_code", INT16, default=0),
    ]), "8+"),
])

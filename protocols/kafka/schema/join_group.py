"""JoinGroup (key 11), versions 0-7 (flexible from 6)."""

from protocols.kafka.codec.declare import ARRAY, BYTES, INT16, INT32, STRING, F, api

JOIN_GROUP = api(11, "JoinGroup", (0, 7), flexible="6+", request=[
    F("group_id", STRING),
    F("session_timeout_ms", INT32),
    F("rebalance_timeout_ms", INT32, "1+", default=-1),
    F("member_id", STRING),
    F("group_instance_id", STRING, "5+", nullable="5+", default=None),
    F("protocol_type", STRING),
    F("protocols", ARRAY([
        F("name", STRING),
        F("metadata", BYTES),
    ])),
], response=[
    F("throttle_time_ms", INT32, "2+"),
    F("error_code", INT16),
    F("generation_id", INT32, default=-1),
    F("protocol_type", STRING, "7+", nullable="7+", default=None),
    F("protocol_name", STRING, nullable="7+"),
    F("leader", STRING),
    F("member_id", STRING),
    F("members", ARRAY([
        F("member_id", STRING),
        F("group_instance_id", STRING, "5+", nullable="5+", default=None),
        F("metadata", BYTES),
    ])),
])

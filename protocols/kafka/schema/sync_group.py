"""SyncGroup (key 14), versions 0-5 (flexible from 4)."""

from protocols.kafka.codec.declare import ARRAY, BYTES, INT16, INT32, STRING, F, api

SYNC_GROUP = api(14, "SyncGroup", (0, 5), flexible="4+", request=[
    F("group_id", STRING),
    F("generation_id", INT32),
    F("member_id", STRING),
    F("group_instance_id", STRING, "3+", nullable="3+", default=None),
    F("protocol_type", STRING, "5+", nullable="5+", default=None),
    F("protocol_name", STRING, "5+", nullable="5+", default=None),
    F("assignments", ARRAY([
        F("member_id", STRING),
        F("assignment", BYTES),
    ])),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("protocol_type", STRING, "5+", nullable="5+", default=None),
    F("protocol_name", STRING, "5+", nullable="5+", default=None),
    F("assignment", BYTES),
])

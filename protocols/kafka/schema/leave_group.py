"""LeaveGroup (key 13), versions 0-4 (flexible from 4; a batch of members from 3)."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, STRING, F, api

LEAVE_GROUP = api(13, "LeaveGroup", (0, 4), flexible="4+", request=[
    F("group_id", STRING),
    F("member_id", STRING, "0-2"),
    F("members", ARRAY([
        F("member_id", STRING),
        F("group_instance_id", STRING, nullable="0+", default=None),
    ]), "3+"),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("members", ARRAY([
        F("member_id", STRING),
        F("group_instance_id", STRING, nullable="0+", default=None),
        F("error_code", INT16),
    ]), "3+"),
])

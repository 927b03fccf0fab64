"""Heartbeat (key 12), versions 0-4 (flexible from 4)."""

from protocols.kafka.codec.declare import INT16, INT32, STRING, F, api

HEARTBEAT = api(12, "Heartbeat", (0, 4), flexible="4+", request=[
    F("group_id", STRING),
    F("generation_id", INT32),
    F("member_id", STRING),
    F("group_instance_id", STRING, "3+", nullable="3+", default=None),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
])

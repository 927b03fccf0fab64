"""FindCoordinator (key 10), versions 0-3 (flexible from 3)."""

from protocols.kafka.codec.declare import INT8, INT16, INT32, STRING, F, api

FIND_COORDINATOR = api(10, "FindCoordinator", (0, 3), flexible="3+", request=[
    F("key", STRING),
    F("key_type", INT8, "1+"),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("error_message", STRING, "1+", nullable="1+", default=None),
    F("node_id", INT32, default=-1),
    F("host", STRING),
    F("port", INT32, default=-1),
])

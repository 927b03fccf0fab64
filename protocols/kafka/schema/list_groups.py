"""ListGroups (key 16), versions 0-4 (flexible from 3)."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, STRING, F, api

LIST_GROUPS = api(16, "ListGroups", (0, 4), flexible="3+", request=[
    F("states_filter", ARRAY(STRING), "4+"),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("groups", ARRAY([
        F("group_id", STRING),
        F("protocol_type", STRING),
        F("group_state", STRING, "4+"),
    ])),
])

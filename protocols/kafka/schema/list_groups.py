"""ListGroups (key 16), versions 0-5 (flexible from 3)."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, STRING, F, api

LIST_GROUPS = api(16, "ListGroups", (0, 5), flexible="3+", request=[
    F("states_filter", ARRAY(STRING), "4+"),
    F("types_filter", ARRAY(STRING), "5+"),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("groups", ARRAY([
        F("group_id", STRING),
        F("protocol_type", STRING),
        F("group_state", STRING, "4+"),
        F("group_type", STRING, "5+"),
    ])),
])

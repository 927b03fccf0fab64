"""DeleteGroups (key 42), versions 0-2 (flexible from 2)."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, STRING, F, api

DELETE_GROUPS = api(42, "DeleteGroups", (0, 2), flexible="2+", request=[
    F("groups_names", ARRAY(STRING)),
], response=[
    F("throttle_time_ms", INT32),
    F("results", ARRAY([
        F("group_id", STRING),
        F("error_code", INT16),
    ])),
])

"""ConsumerGroupDescribe (key 69), versions 0-1 (flexible): KIP-848's consumer groups in full.
v1 adds each member's type (KIP-1099)."""

from protocols.kafka.codec.declare import ARRAY, BOOL, INT8, INT16, INT32, STRING, UUID, F, api

_ASSIGNMENT = [
    F("topic_partitions", ARRAY([
        F("topic_id", UUID),
        F("topic_name", STRING),
        F("partitions", ARRAY(INT32)),
    ])),
]

CONSUMER_GROUP_DESCRIBE = api(69, "ConsumerGroupDescribe", (0, 1), flexible="0+", request=[
    F("group_ids", ARRAY(STRING)),
    F("include_authorized_operations", BOOL),
], response=[
    F("throttle_time_ms", INT32),
    F("groups", ARRAY([
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
        F("group_id", STRING),
        F("group_state", STRING),
        F("group_epoch", INT32),
        F("assignment_epoch", INT32),
        F("assignor_name", STRING),
        F("members", ARRAY([
            F("member_id", STRING),
            F("instance_id", STRING, nullable="0+", default=None),
            F("rack_id", STRING, nullable="0+", default=None),
            F("member_epoch", INT32),
            F("client_id", STRING),
            F("client_host", STRING),
            F("subscribed_topic_names", ARRAY(STRING)),
            F("subscribed_topic_regex", STRING, nullable="0+", default=None),
            F("assignment", _ASSIGNMENT),
            F("target_assignment", _ASSIGNMENT),
            F("member_type", INT8, "1+", default=-1),     # -1 unknown, 0 classic, 1 consumer
        ])),
        F("authorized_operations", INT32, default=-2147483648),
    ])),
])

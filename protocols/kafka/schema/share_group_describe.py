"""ShareGroupDescribe (key 77), version 1 (flexible): KIP-932 share groups in full.
Version 0 was Kafka 4.0's early access, removed in 4.1; version 1 is the stable one."""

from protocols.kafka.codec.declare import ARRAY, BOOL, INT16, INT32, STRING, UUID, F, api

SHARE_GROUP_DESCRIBE = api(77, "ShareGroupDescribe", (1, 1), flexible="0+", request=[
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
            F("rack_id", STRING, nullable="0+", default=None),
            F("member_epoch", INT32),
            F("client_id", STRING),
            F("client_host", STRING),
            F("subscribed_topic_names", ARRAY(STRING)),
            F("assignment", [
                F("topic_partitions", ARRAY([
                    F("topic_id", UUID),
                    F("topic_name", STRING),
                    F("partitions", ARRAY(INT32)),
                ])),
            ]),
        ])),
        F("authorized_operations", INT32, default=-2147483648),
    ])),
])

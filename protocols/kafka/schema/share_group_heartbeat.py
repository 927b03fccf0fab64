"""ShareGroupHeartbeat (key 76), version 1 (flexible): KIP-932 share group membership.
Version 0 was Kafka 4.0's early access, removed in 4.1; version 1 is the stable one."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, STRING, UUID, F, api

SHARE_GROUP_HEARTBEAT = api(76, "ShareGroupHeartbeat", (1, 1), flexible="0+", request=[
    F("group_id", STRING),
    F("member_id", STRING),
    F("member_epoch", INT32),
    F("rack_id", STRING, nullable="0+", default=None),
    F("subscribed_topic_names", ARRAY(STRING), nullable="0+", default=None),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F("member_id", STRING, nullable="0+", default=None),
    F("member_epoch", INT32),
    F("heartbeat_interval_ms", INT32),
    F("assignment", [
        F("topic_partitions", ARRAY([
            F("topic_id", UUID),
            F("partitions", ARRAY(INT32)),
        ])),
    ], nullable="0+", default=None),
])

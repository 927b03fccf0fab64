"""ConsumerGroupHeartbeat (key 68), versions 0-1 (flexible): KIP-848's consumer group protocol.
v1 adds the subscribed topic regex, and the member id is the client's own (KIP-1082)."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, STRING, UUID, F, api

_TOPIC_PARTITIONS = ARRAY([
    F("topic_id", UUID),
    F("partitions", ARRAY(INT32)),
])

CONSUMER_GROUP_HEARTBEAT = api(68, "ConsumerGroupHeartbeat", (0, 1), flexible="0+", request=[
    F("group_id", STRING),
    F("member_id", STRING),
    F("member_epoch", INT32),
    F("instance_id", STRING, nullable="0+", default=None),
    F("rack_id", STRING, nullable="0+", default=None),
    F("rebalance_timeout_ms", INT32, default=-1),
    F("subscribed_topic_names", ARRAY(STRING), nullable="0+", default=None),
    F("subscribed_topic_regex", STRING, "1+", nullable="1+", default=None),
    F("server_assignor", STRING, nullable="0+", default=None),
    F("topic_partitions", _TOPIC_PARTITIONS, nullable="0+", default=None),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F("member_id", STRING, nullable="0+", default=None),
    F("member_epoch", INT32),
    F("heartbeat_interval_ms", INT32),
    F("assignment", [
        F("topic_partitions", _TOPIC_PARTITIONS),
    ], nullable="0+", default=None),
])

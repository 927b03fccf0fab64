"""ShareAcknowledge (key 79), version 1 (flexible): KIP-932 acknowledgements on their own (and the
closing of a share session). Version 0 was Kafka 4.0's early access, removed in 4.1."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, STRING, UUID, F, api
from protocols.kafka.schema.share_fetch import ACKNOWLEDGEMENT_BATCHES, CURRENT_LEADER, NODE_ENDPOINTS

SHARE_ACKNOWLEDGE = api(79, "ShareAcknowledge", (1, 1), flexible="0+", request=[
    F("group_id", STRING, nullable="0+", default=None),
    F("member_id", STRING, nullable="0+"),
    F("share_session_epoch", INT32),
    F("topics", ARRAY([
        F("topic_id", UUID),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("acknowledgement_batches", ACKNOWLEDGEMENT_BATCHES),
        ])),
    ])),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F("responses", ARRAY([
        F("topic_id", UUID),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=None),
            F("current_leader", CURRENT_LEADER),
        ])),
    ])),
    F("node_endpoints", NODE_ENDPOINTS),
])

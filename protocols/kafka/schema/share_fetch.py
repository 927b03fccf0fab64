"""ShareFetch (key 78), version 1 (flexible): KIP-932 fetches that acquire records, with
acknowledgements piggybacked. Version 0 was Kafka 4.0's early access, removed in 4.1."""

from protocols.kafka.codec.declare import ARRAY, INT8, INT16, INT32, INT64, RECORDS, STRING, UUID, F, api

ACKNOWLEDGEMENT_BATCHES = ARRAY([
    F("first_offset", INT64),
    F("last_offset", INT64),
    F("acknowledge_types", ARRAY(INT8)),
])

CURRENT_LEADER = [
    F("leader_id", INT32),
    F("leader_epoch", INT32),
]

NODE_ENDPOINTS = ARRAY([
    F("node_id", INT32),
    F("host", STRING),
    F("port", INT32),
    F("rack", STRING, nullable="0+", default=None),
])

SHARE_FETCH = api(78, "ShareFetch", (1, 1), flexible="0+", request=[
    F("group_id", STRING, nullable="0+", default=None),
    F("member_id", STRING, nullable="0+"),
    F("share_session_epoch", INT32),
    F("max_wait_ms", INT32),
    F("min_bytes", INT32),
    F("max_bytes", INT32, default=0x7FFFFFFF),
    F("max_records", INT32),
    F("batch_size", INT32),
    F("topics", ARRAY([
        F("topic_id", UUID),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("acknowledgement_batches", ACKNOWLEDGEMENT_BATCHES),
        ])),
    ])),
    F("forgotten_topics_data", ARRAY([
        F("topic_id", UUID),
        F("partitions", ARRAY(INT32)),
    ])),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F("acquisition_lock_timeout_ms", INT32),
    F("responses", ARRAY([
        F("topic_id", UUID),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=None),
            F("acknowledge_error_code", INT16),
            F("acknowledge_error_message", STRING, nullable="0+", default=None),
            F("current_leader", CURRENT_LEADER),
            F("records", RECORDS, nullable="0+"),
            F("acquired_records", ARRAY([
                F("first_offset", INT64),
                F("last_offset", INT64),
                F("delivery_count", INT16),
            ])),
        ])),
    ])),
    F("node_endpoints", NODE_ENDPOINTS),
])

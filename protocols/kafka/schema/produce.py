"""Produce (key 0), versions 0-9 (flexible from 9)."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, INT64, RECORDS, STRING, F, api

PRODUCE = api(0, "Produce", (0, 9), flexible="9+", request=[
    F("transactional_id", STRING, "3+", nullable="3+"),
    F("acks", INT16),
    F("timeout_ms", INT32),
    F("topic_data", ARRAY([
        F("name", STRING),
        F("partition_data", ARRAY([
            F("index", INT32),
            F("records", RECORDS, nullable="0+"),
        ])),
    ])),
], response=[
    F("responses", ARRAY([
        F("name", STRING),
        F("partition_responses", ARRAY([
            F("index", INT32),
            F("error_code", INT16),
            F("base_offset", INT64),
            F("log_append_time_ms", INT64, "2+", default=-1),
            F("log_start_offset", INT64, "5+", default=-1),
            F("record_errors", ARRAY([
                F("batch_index", INT32),
                F("batch_index_error_message", STRING, nullable="8+"),
            ]), "8+"),
            F("error_message", STRING, "8+", nullable="8+"),
        ])),
    ])),
    F("throttle_time_ms", INT32, "1+"),
])

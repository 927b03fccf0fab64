"""Fetch (key 1), versions 0-12 (flexible from 12)."""

from protocols.kafka.codec.declare import ARRAY, INT8, INT16, INT32, INT64, RECORDS, STRING, F, api

FETCH = api(1, "Fetch", (0, 12), flexible="12+", request=[
    F("cluster_id", STRING, "12+", nullable="12+", tag=0, default=None),
    F("replica_id", INT32),
    F("max_wait_ms", INT32),
    F("min_bytes", INT32),
    F("max_bytes", INT32, "3+", default=0x7FFFFFFF),
    F("isolation_level", INT8, "4+"),
    F("session_id", INT32, "7+"),
    F("session_epoch", INT32, "7+", default=-1),
    F("topics", ARRAY([
        F("topic", STRING),
        F("partitions", ARRAY([
            F("partition", INT32),
            F("current_leader_epoch", INT32, "9+", default=-1),
            F("fetch_offset", INT64),
            F("last_fetched_epoch", INT32, "12+", default=-1),
            F("log_start_offset", INT64, "5+", default=-1),
            F("partition_max_bytes", INT32),
        ])),
    ])),
    F("forgotten_topics_data", ARRAY([
        F("topic", STRING),
        F("partitions", ARRAY(INT32)),
    ]), "7+"),
    F("rack_id", STRING, "11+"),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16, "7+"),
    F("session_id", INT32, "7+"),
    F("responses", ARRAY([
        F("topic", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("error_code", INT16),
            F("high_watermark", INT64),
            F("last_stable_offset", INT64, "4+", default=-1),
            F("log_start_offset", INT64, "5+", default=-1),
            F("aborted_transactions", ARRAY([
                F("producer_id", INT64),
                F("first_offset", INT64),
            ]), "4+", nullable="4+"),
            F("diverging_epoch", [F("epoch", INT32), F("end_offset", INT64)], "12+", tag=0),
            F("preferred_read_replica", INT32, "11+", default=-1),
            F("records", RECORDS, nullable="0+"),
        ])),
    ])),
])

"""DescribeProducers (key 61), version 0 (flexible)."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, INT64, STRING, F, api

DESCRIBE_PRODUCERS = api(61, "DescribeProducers", (0, 0), flexible="0+", request=[
    F("topics", ARRAY([
        F("name", STRING),
        F("partition_indexes", ARRAY(INT32)),
    ])),
], response=[
    F("throttle_time_ms", INT32),
    F("topics", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            F("active_producers", ARRAY([
                F("producer_id", INT64),
                F("producer_epoch", INT32),
                F("last_sequence", INT32, default=-1),
                F("last_timestamp", INT64, default=-1),
                F("coordinator_epoch", INT32),
                F("current_txn_start_offset", INT64, default=-1),
            ])),
        ])),
    ])),
])

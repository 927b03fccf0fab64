"""AddPartitionsToTxn (key 24), versions 0-3 (flexible from 3); v4+ (broker batches) not served."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, INT64, STRING, F, api

ADD_PARTITIONS_TO_TXN = api(24, "AddPartitionsToTxn", (0, 3), flexible="3+", request=[
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("topics", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY(INT32)),
    ])),
], response=[
    F("throttle_time_ms", INT32),
    F("results", ARRAY([
        F("name", STRING),
        F("results", ARRAY([
            F("partition_index", INT32),
            F("error_code", INT16),
        ])),
    ])),
])

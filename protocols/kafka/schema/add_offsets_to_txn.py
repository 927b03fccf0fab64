"""AddOffsetsToTxn (key 25), versions 0-3 (flexible from 3)."""

from protocols.kafka.codec.declare import INT16, INT32, INT64, STRING, F, api

ADD_OFFSETS_TO_TXN = api(25, "AddOffsetsToTxn", (0, 3), flexible="3+", request=[
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("group_id", STRING),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
])

"""EndTxn (key 26), versions 0-3 (flexible from 3)."""

from protocols.kafka.codec.declare import BOOL, INT16, INT32, INT64, STRING, F, api

END_TXN = api(26, "EndTxn", (0, 3), flexible="3+", request=[
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("committed", BOOL),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
])

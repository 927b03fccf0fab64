"""InitProducerId (key 22), versions 0-4 (flexible from 2)."""

from protocols.kafka.codec.declare import INT16, INT32, INT64, STRING, F, api

INIT_PRODUCER_ID = api(22, "InitProducerId", (0, 4), flexible="2+", request=[
    F("transactional_id", STRING, nullable="0+"),
    F("transaction_timeout_ms", INT32),
    F("producer_id", INT64, "3+", default=-1),
    F("producer_epoch", INT16, "3+", default=-1),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("producer_id", INT64, default=-1),
    F("producer_epoch", INT16, default=-1),
])

"""DeleteRecords (key 21), versions 0-2 (flexible from 2)."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, INT64, STRING, F, api

DELETE_RECORDS = api(21, "DeleteRecords", (0, 2), flexible="2+", request=[
    F("topics", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("offset", INT64),
        ])),
    ])),
    F("timeout_ms", INT32),
], response=[
    F("throttle_time_ms", INT32),
    F("topics", ARRAY([
        F("name", STRING),
        F("partitions", ARRAY([
            F("partition_index", INT32),
            F("low_watermark", INT64, default=-1),
            F("error_code", INT16),
        ])),
    ])),
])

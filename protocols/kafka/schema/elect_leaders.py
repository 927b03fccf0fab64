"""ElectLeaders (key 43), versions 0-2 (flexible from 2)."""

from protocols.kafka.codec.declare import ARRAY, INT8, INT16, INT32, STRING, F, api

ELECT_LEADERS = api(43, "ElectLeaders", (0, 2), flexible="2+", request=[
    F("election_type", INT8, "1+"),
    F("topic_partitions", ARRAY([
        F("topic", STRING),
        F("partition_id", ARRAY(INT32)),
    ]), nullable="0+"),
    F("timeout_ms", INT32, default=60000),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16, "1+"),
    F("replica_election_results", ARRAY([
        F("topic", STRING),
        F("partition_result", ARRAY([
            F("partition_id", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
        ])),
    ])),
])

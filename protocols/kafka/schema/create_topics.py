"""CreateTopics (key 19), versions 0-7 (flexible from 5)."""

from protocols.kafka.codec.declare import ARRAY, BOOL, INT8, INT16, INT32, STRING, UUID, F, api

CREATE_TOPICS = api(19, "CreateTopics", (0, 7), flexible="5+", request=[
    F("topics", ARRAY([
        F("name", STRING),
        F("num_partitions", INT32),
        F("replication_factor", INT16),
        F("assignments", ARRAY([
            F("partition_index", INT32),
            F("broker_ids", ARRAY(INT32)),
        ])),
        F("configs", ARRAY([
            F("name", STRING),
            F("value", STRING, nullable="0+"),
        ])),
    ])),
    F("timeout_ms", INT32, default=60000),
    F("validate_only", BOOL, "1+"),
], response=[
    F("throttle_time_ms", INT32, "2+"),
    F("topics", ARRAY([
        F("name", STRING),
        F("topic_id", UUID, "7+"),
        F("error_code", INT16),
        F("error_message", STRING, "1+", nullable="0+"),
        F("topic_config_error_code", INT16, "5+", tag=0),
        F("num_partitions", INT32, "5+", default=-1),
        F("replication_factor", INT16, "5+", default=-1),
        F("configs", ARRAY([
            F("name", STRING),
            F("value", STRING, nullable="5+"),
            F("read_only", BOOL),
            F("config_source", INT8, default=-1),
            F("is_sensitive", BOOL),
        ]), "5+", nullable="5+"),
    ])),
])

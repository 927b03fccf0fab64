"""Metadata (key 3), versions 0-12 (flexible from 9; v12 looks topics up by id)."""

from protocols.kafka.codec.declare import ARRAY, BOOL, INT16, INT32, STRING, UUID, F, api

METADATA = api(3, "Metadata", (0, 12), flexible="9+", request=[
    F("topics", ARRAY([
        F("topic_id", UUID, "10+"),
        F("name", STRING, nullable="10+"),
    ]), nullable="1+"),
    F("allow_auto_topic_creation", BOOL, "4+", default=True),
    F("include_cluster_authorized_operations", BOOL, "8-10"),
    F("include_topic_authorized_operations", BOOL, "8+"),
], response=[
    F("throttle_time_ms", INT32, "3+"),
    F("brokers", ARRAY([
        F("node_id", INT32),
        F("host", STRING),
        F("port", INT32),
        F("rack", STRING, "1+", nullable="1+"),
    ])),
    F("cluster_id", STRING, "2+", nullable="2+"),
    F("controller_id", INT32, "1+", default=-1),
    F("topics", ARRAY([
        F("error_code", INT16),
        F("name", STRING, nullable="12+"),
        F("topic_id", UUID, "10+"),
        F("is_internal", BOOL, "1+"),
        F("partitions", ARRAY([
            F("error_code", INT16),
            F("partition_index", INT32),
            F("leader_id", INT32),
            F("leader_epoch", INT32, "7+", default=-1),
            F("replica_nodes", ARRAY(INT32)),
            F("isr_nodes", ARRAY(INT32)),
            F("offline_replicas", ARRAY(INT32), "5+"),
        ])),
        F("topic_authorized_operations", INT32, "8+", default=-2147483648),
    ])),
    F("cluster_authorized_operations", INT32, "8-10", default=-2147483648),
])

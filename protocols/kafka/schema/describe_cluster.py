"""DescribeCluster (key 60), version 0 (flexible)."""

from protocols.kafka.codec.declare import ARRAY, BOOL, INT16, INT32, STRING, F, api

DESCRIBE_CLUSTER = api(60, "DescribeCluster", (0, 0), flexible="0+", request=[
    F("include_cluster_authorized_operations", BOOL),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F("cluster_id", STRING),
    F("controller_id", INT32, default=-1),
    F("brokers", ARRAY([
        F("broker_id", INT32),
        F("host", STRING),
        F("port", INT32),
        F("rack", STRING, nullable="0+"),
    ])),
    F("cluster_authorized_operations", INT32, default=-2147483648),
])

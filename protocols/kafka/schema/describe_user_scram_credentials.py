"""DescribeUserScramCredentials (key 50), version 0 (flexible)."""

from protocols.kafka.codec.declare import ARRAY, INT8, INT16, INT32, STRING, F, api

DESCRIBE_USER_SCRAM_CREDENTIALS = api(50, "DescribeUserScramCredentials", (0, 0), flexible="0+", request=[
    F("users", ARRAY([
        F("name", STRING),
    ]), nullable="0+"),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F("results", ARRAY([
        F("user", STRING),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
        F("credential_infos", ARRAY([
            F("mechanism", INT8),
            F("iterations", INT32),
        ])),
    ])),
])

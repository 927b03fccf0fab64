"""AlterUserScramCredentials (key 51), version 0 (flexible)."""

from protocols.kafka.codec.declare import ARRAY, BYTES, INT8, INT16, INT32, STRING, F, api

ALTER_USER_SCRAM_CREDENTIALS = api(51, "AlterUserScramCredentials", (0, 0), flexible="0+", request=[
    F("deletions", ARRAY([
        F("name", STRING),
        F("mechanism", INT8),
    ])),
    F("upsertions", ARRAY([
        F("name", STRING),
        F("mechanism", INT8),
        F("iterations", INT32),
        F("salt", BYTES),
        F("salted_password", BYTES),
    ])),
], response=[
    F("throttle_time_ms", INT32),
    F("results", ARRAY([
        F("user", STRING),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
    ])),
])

"""DeleteTopics (key 20), versions 0-6 (flexible from 4)."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, STRING, UUID, F, api

DELETE_TOPICS = api(20, "DeleteTopics", (0, 6), flexible="4+", request=[
    F("topics", ARRAY([
        F("name", STRING, nullable="6+"),
        F("topic_id", UUID),
    ]), "6+"),
    F("topic_names", ARRAY(STRING), "0-5"),
    F("timeout_ms", INT32),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("responses", ARRAY([
        F("name", STRING, nullable="6+"),
        F("topic_id", UUID, "6+"),
        F("error_code", INT16),
        F("error_message", STRING, "5+", nullable="5+"),
    ])),
])

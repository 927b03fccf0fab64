"""DescribeConfigs (key 32), versions 0-4 (flexible from 4)."""

from protocols.kafka.codec.declare import ARRAY, BOOL, INT8, INT16, INT32, STRING, F, api

DESCRIBE_CONFIGS = api(32, "DescribeConfigs", (0, 4), flexible="4+", request=[
    F("resources", ARRAY([
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("configuration_keys", ARRAY(STRING), nullable="0+"),
    ])),
    F("include_synonyms", BOOL, "1+"),
    F("include_documentation", BOOL, "3+"),
], response=[
    F("throttle_time_ms", INT32),
    F("results", ARRAY([
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("configs", ARRAY([
            F("name", STRING),
            F("value", STRING, nullable="0+"),
            F("read_only", BOOL),
            F("is_default", BOOL, "0"),
            F("config_source", INT8, "1+", default=-1),
            F("is_sensitive", BOOL),
            F("synonyms", ARRAY([
                F("name", STRING),
                F("value", STRING, nullable="0+"),
                F("source", INT8),
            ]), "1+"),
            F("config_type", INT8, "3+"),
            F("documentation", STRING, "3+", nullable="0+"),
        ])),
    ])),
])

"""ApiVersions (key 18), versions 0-3 (flexible from 3)."""

from protocols.kafka.codec.declare import ARRAY, INT16, INT32, STRING, F, api

API_VERSIONS = api(18, "ApiVersions", (0, 3), flexible="3+", request=[
    F("client_software_name", STRING, "3+"),
    F("client_software_version", STRING, "3+"),
], response=[
    F("error_code", INT16),
    F("api_keys", ARRAY([
        F("api_key", INT16),
        F("min_version", INT16),
        F("max_version", INT16),
    ])),
    F("throttle_time_ms", INT32, "1+"),
])

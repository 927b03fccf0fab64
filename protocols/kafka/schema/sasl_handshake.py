"""SaslHandshake (key 17), versions 0-1 (never flexible)."""

from protocols.kafka.codec.declare import ARRAY, INT16, STRING, F, api

SASL_HANDSHAKE = api(17, "SaslHandshake", (0, 1), request=[
    F("mechanism", STRING),
], response=[
    F("error_code", INT16),
    F("mechanisms", ARRAY(STRING)),
])

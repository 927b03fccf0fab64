"""The one exception every MQTT decode failure raises, carrying the MQTT 5 reason code the
connection is closed with (3.1.1 has no such code: the connection is just closed)."""

from __future__ import annotations

MALFORMED_PACKET = 0x81
PROTOCOL_ERROR = 0x82
PACKET_TOO_LARGE = 0x95
TOPIC_NAME_INVALID = 0x90


class DecodeError(Exception):
    def __init__(self, reason_code: int, message: str) -> None:
        super().__init__(message)
        self.reason_code = reason_code


def malformed(message: str) -> DecodeError:
    return DecodeError(MALFORMED_PACKET, message)


def protocol_error(message: str) -> DecodeError:
    return DecodeError(PROTOCOL_ERROR, message)

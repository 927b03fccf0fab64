"""A Kafka error code with its message, raised for one resource (topic, partition, config resource)
while an admin request is handled; the handler turns it into that resource's result."""

from __future__ import annotations

from core.errors import CoreError
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code


class ApiError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message

    @classmethod
    def of(cls, exc: CoreError) -> "ApiError":
        return cls(kafka_code(exc), str(exc) or None)


def timed_out_unless_waited(code: ErrorCode, timeout_ms: int) -> ErrorCode:
    """Kafka answers REQUEST_TIMED_OUT for a change it made but was told not to wait for
    (timeout_ms <= 0); the change is done all the same."""
    return ErrorCode.REQUEST_TIMED_OUT if code == ErrorCode.NONE and timeout_ms <= 0 else code

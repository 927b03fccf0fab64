"""Config resources (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs): their type codes, how
Kafka names one in a message, and the rules for naming this broker."""

from __future__ import annotations

from protocols.kafka.admin.errors import ApiError
from protocols.kafka.codec.errors import ErrorCode

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
_TYPE_NAMES = {TOPIC: "TOPIC", BROKER: "BROKER", BROKER_LOGGER: "BROKER_LOGGER"}


def resource_text(resource_type: int, name: str) -> str:
    return f"ConfigResource(type={_TYPE_NAMES.get(resource_type, 'UNKNOWN')}, name='{name}')"


def is_this_broker(name: str, node_id: int, *, default_allowed: bool) -> bool:
    """True for this broker's id, False for "" (all brokers' defaults); anything else is Kafka's
    INVALID_REQUEST."""
    if not name:
        return False
    try:
        broker_id = int(name)
    except ValueError:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}") from None
    if broker_id != node_id:
        expected = f"{node_id} or empty string" if default_allowed else str(node_id)
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {expected}, but received {name}")
    return True

"""Single active consumer (x-single-active-consumer): of a queue's consumers only the earliest
registered one still there receives messages; the others wait in registration order.

When the active consumer goes (cancelled, its channel or connection closed) the next one becomes
active at once; what the old one held unacknowledged is requeued when its channel lets go of it
(channel closed) and then handed to the new one first, in log order. Every consumer counts in the
queue's consumer count, waiting or not; an exclusive basic.consume is refused while the queue has
other consumers, as on any queue (RabbitMQ 3.10 does the same).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.errors import InvalidArgument
from core.queues.policy import field_type

SINGLE_ACTIVE_ARGUMENT = "x-single-active-consumer"


def single_active(queue: str, arguments: Mapping[str, Any]) -> bool:
    """Whether the queue has a single active consumer; InvalidArgument unless the value is a bool."""
    value = arguments.get(SINGLE_ACTIVE_ARGUMENT)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidArgument(f"invalid arg '{SINGLE_ACTIVE_ARGUMENT}' for queue '{queue}': "
                              f"{{unacceptable_type,{field_type(value)}}}")
    return value

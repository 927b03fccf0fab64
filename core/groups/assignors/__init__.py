"""The server-side assignors of consumer groups (KIP-848), by the name a member asks for."""

from __future__ import annotations

from core.groups.assignors import averagely, circle, consistent_hash, machine_room, uniform
from core.groups.assignors import range as per_topic_range
from core.groups.assignors.spec import Assignor

DEFAULT = "uniform"
ASSIGNORS: dict[str, Assignor] = {
    "uniform": uniform.assign,
    "range": per_topic_range.assign,
    "averagely": averagely.assign,
    "circle": circle.assign,
    "consistent-hash": consistent_hash.assign,
    "machine-room": machine_room.assign,
}

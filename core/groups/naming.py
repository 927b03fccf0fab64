"""Group ids as storage names: the cursor name and the record name of a group.

Group ids may hold any characters; stored names may hold only [A-Za-z0-9._-]. A group's stored
name is "group." followed by its id with every character outside [A-Za-z0-9_-] written as ".xx"
per UTF-8 byte, so "orders.eu" is stored as "group.orders.2eeu", and every stored name maps back
to exactly one group id.
"""

from __future__ import annotations

from core.errors import InvalidGroupId
from core.names import MAX_NAME, escaped_name, unescaped_name

PREFIX = "group."


def storage_name(group_id: str) -> str:
    name = escaped_name(PREFIX, group_id)
    if len(name) > MAX_NAME:
        raise InvalidGroupId(f"group id {group_id[:40]!r}... is too long to store ({len(name)} > {MAX_NAME})")
    return name


def group_id_of(name: str) -> str | None:
    """The group id stored under `name`, or None if `name` is not a group's stored name."""
    return unescaped_name(PREFIX, name)

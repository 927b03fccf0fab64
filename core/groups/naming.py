"""Group ids as storage names: the cursor name and the record name of a group.

Group ids may hold any characters; stored names may hold only [A-Za-z0-9._-]. A group's stored
name is "group." followed by its id with every character outside [A-Za-z0-9_-] written as ".xx"
per UTF-8 byte, so "orders.eu" is stored as "group.orders.2eeu", and every stored name maps back
to exactly one group id.
"""

from __future__ import annotations

import re

from core.errors import InvalidGroupId

PREFIX = "group."
MAX_NAME = 249                      # core.names' limit on a name
_PLAIN = re.compile(r"[A-Za-z0-9_-]")


def storage_name(group_id: str) -> str:
    parts = [PREFIX]
    for char in group_id:
        if _PLAIN.fullmatch(char):
            parts.append(char)
        else:
            parts.extend(f".{byte:02x}" for byte in char.encode())
    name = "".join(parts)
    if len(name) > MAX_NAME:
        raise InvalidGroupId(f"group id {group_id[:40]!r}... is too long to store ({len(name)} > {MAX_NAME})")
    return name


def group_id_of(name: str) -> str | None:
    """The group id stored under `name`, or None if `name` is not a group's stored name."""
    if not name.startswith(PREFIX):
        return None
    encoded = name[len(PREFIX):]
    out = bytearray()
    i = 0
    try:
        while i < len(encoded):
            if encoded[i] == ".":
                digits = encoded[i + 1:i + 3]
                if len(digits) != 2:
                    return None
                out.append(int(digits, 16))
                i += 3
            else:
                out += encoded[i].encode()
                i += 1
        return out.decode()
    except (ValueError, UnicodeDecodeError):
        return None

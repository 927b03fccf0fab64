"""Names of exchanges and queues as storage sees them.

Exchange and queue names may hold any characters (up to 255 UTF-8 bytes); metadata path components
and topic names may hold only [A-Za-z0-9._-]. So:

- a metadata path component is the name with every character outside [A-Za-z0-9_-] written as
  ".xx" per UTF-8 byte ("orders.eu" -> "orders.2eeu"): one-to-one, and never empty (the default
  exchange, whose name is "", is implicit and never stored);
- a queue's topic is the queue's own name when that is a legal topic name, so a queue "orders" is
  the topic "orders" that Kafka clients see; any other name gets "queue-" and a hash of the name.
"""

from __future__ import annotations

import hashlib
import re

from core.names import escaped_name, unescaped_name

_LEGAL_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
MAX_NAME_BYTES = 255


def storage_key(name: str) -> str:
    """The metadata path component of an exchange or queue name (one-to-one)."""
    if not name:
        raise ValueError("the empty name is never stored")
    return escaped_name("", name)


def name_of(key: str) -> str:
    """The name a storage key stands for (the inverse of storage_key)."""
    name = unescaped_name("", key)
    if name is None:
        raise ValueError(f"{key!r} is not a storage key")
    return name


def queue_topic(name: str) -> str:
    """The topic holding a queue's messages."""
    if _LEGAL_TOPIC.match(name) and name not in (".", ".."):
        return name
    return "queue-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:40]

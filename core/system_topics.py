"""Topics the core keeps for itself in every namespace: the delayed-delivery store's held messages
and index (core/delayed/store.py).

Clients may read them, as Kafka lets them read `__consumer_offsets`, but not write, trim,
reconfigure, grow, create or delete them: a record written there, a retention set on them or a
trim would corrupt or lose held messages. Each front end calls `refuse_change` where a client asks
for such a change and answers the ReservedName with its own error; the core's own paths (the store,
namespace deletion) do not go through it.
"""

from __future__ import annotations

from core.delayed.store import INDEX_TOPIC, SYSTEM_TOPIC
from core.errors import ReservedName

SYSTEM_TOPICS = frozenset({SYSTEM_TOPIC, INDEX_TOPIC})


def refuse_change(topic: str) -> None:
    if topic in SYSTEM_TOPICS:
        raise ReservedName(f"topic '{topic}' is kept by the gateway for delayed delivery: clients may only read it")

"""TopicName lookups for the hot handlers (Produce, Fetch), cached.

`TopicName.of` checks three names against a regular expression and builds a frozen dataclass; a
producer names the same few topics in every request, so the checked name is remembered. Invalid
names raise InvalidName as before (exceptions are not cached).
"""

from functools import lru_cache

from core.names import TopicName


@lru_cache(maxsize=4096)
def topic_name(topic: str, tenant: str, namespace: str) -> TopicName:
    return TopicName.of(topic, tenant, namespace)

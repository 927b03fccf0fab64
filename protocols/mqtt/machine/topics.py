"""Topic names and topic filters: validity, matching, shared subscriptions, and the mapping to the
routing keys of a topic exchange.

MQTT topics travel through the namespace's `amq.topic` exchange as RabbitMQ's MQTT plugin sends
them: the level separator "/" becomes the word separator ".", and "." becomes "/" (a swap, so the
mapping is one-to-one); in filters "+" becomes "*" and "#" stays "#". The exchange's matching is
close to MQTT's but not equal (it knows nothing of "$" topics), so a delivery is checked again
against the session's own filters with `matches`.
"""

from __future__ import annotations

SHARE_PREFIX = "$share/"
_TO_KEY = str.maketrans({"/": ".", ".": "/"})
_FROM_KEY = str.maketrans({".": "/", "/": "."})
MAX_TOPIC_BYTES = 65_535


class InvalidTopic(ValueError):
    """A topic name or filter MQTT does not allow."""


def check_name(topic: str) -> str:
    """A topic name a PUBLISH may carry: not empty, no wildcards."""
    if not topic:
        raise InvalidTopic("empty topic name")
    if "+" in topic or "#" in topic:
        raise InvalidTopic(f"wildcard in topic name {topic!r}")
    return topic


def check_filter(topic_filter: str) -> str:
    """A topic filter: "#" only as the whole last level, "+" only as a whole level."""
    if not topic_filter:
        raise InvalidTopic("empty topic filter")
    levels = topic_filter.split("/")
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != len(levels) - 1):
            raise InvalidTopic(f"'#' not alone as the last level of {topic_filter!r}")
        if "+" in level and level != "+":
            raise InvalidTopic(f"'+' not alone in a level of {topic_filter!r}")
    return topic_filter


def split_shared(topic_filter: str) -> tuple[str | None, str]:
    """(share group, filter) of `$share/group/filter`; (None, filter) for an ordinary filter."""
    if not topic_filter.startswith(SHARE_PREFIX):
        return None, topic_filter
    group, slash, rest = topic_filter[len(SHARE_PREFIX):].partition("/")
    if not group or not slash or "+" in group or "#" in group:
        raise InvalidTopic(f"malformed shared subscription {topic_filter!r}")
    return group, check_filter(rest)


def matches(topic_filter: str, topic: str) -> bool:
    """Whether `topic` matches `topic_filter`; a topic starting with "$" is never matched by a
    filter whose first level is a wildcard."""
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False
    filter_levels = topic_filter.split("/")
    topic_levels = topic.split("/")
    for index, level in enumerate(filter_levels):
        if level == "#":
            return True
        if index >= len(topic_levels):
            return False
        if level != "+" and level != topic_levels[index]:
            return False
    return len(filter_levels) == len(topic_levels)


def routing_key(topic: str) -> str:
    """The routing key of a topic name, or the binding key of a topic filter."""
    return topic.translate(_TO_KEY).replace("+", "*") if "+" in topic else topic.translate(_TO_KEY)


def topic_of_key(key: str) -> str:
    """The MQTT topic of a routing key (an AMQP publish to amq.topic)."""
    return key.translate(_FROM_KEY)

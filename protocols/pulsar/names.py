"""Pulsar topic names as the core's tenant / namespace / topic and partition.

    persistent://tenant/namespace/topic                a topic (non-partitioned: partition 0)
    persistent://tenant/namespace/topic-partition-3   partition 3 of a partitioned topic
    topic, tenant/namespace/topic                     short forms: persistent://public/default/topic

`public/default` is where an unauthenticated Kafka client and the AMQP vhost "/" land, so a Kafka
topic `orders` is `persistent://public/default/orders`. `non-persistent://` is refused: the
gateway keeps every message. Names follow the core's rule ([A-Za-z0-9._-]).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.errors import InvalidName
from core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT, TopicName, check_name

PERSISTENT = "persistent://"
PARTITION_SUFFIX = "-partition-"
_PARTITIONED = re.compile(r"^(.+)-partition-(0|[1-9][0-9]{0,8})$")


@dataclass(frozen=True, slots=True)
class PulsarTopic:
    name: TopicName
    partition: int | None      # None: the topic as a whole (non-partitioned, or all partitions)

    @property
    def index(self) -> int:
        return self.partition or 0

    def text(self) -> str:
        suffix = "" if self.partition is None else f"{PARTITION_SUFFIX}{self.partition}"
        return f"{PERSISTENT}{self.name.path}{suffix}"


def parse_topic(text: str) -> PulsarTopic:
    """The core topic a Pulsar topic name names; InvalidName when it names none."""
    if "://" in text:
        domain, _, rest = text.partition("://")
        if domain != PERSISTENT[:-3]:
            raise InvalidName(f"{domain}:// topics are not served (only persistent://)")
        parts = rest.split("/")
        if len(parts) != 3:
            raise InvalidName(f"topic name {text!r} is not persistent://tenant/namespace/topic")
    else:
        parts = text.split("/")
        if len(parts) == 1:
            parts = [DEFAULT_TENANT, DEFAULT_NAMESPACE, parts[0]]
        elif len(parts) != 3:
            raise InvalidName(f"topic name {text!r} is neither topic nor tenant/namespace/topic")
    tenant, namespace, topic = parts
    match = _PARTITIONED.match(topic)
    partition = None
    if match is not None:
        topic, partition = match.group(1), int(match.group(2))
    return PulsarTopic(TopicName.of(topic, tenant, namespace), partition)


def parse_namespace(text: str) -> tuple[str, str]:
    parts = text.split("/")
    if len(parts) != 2:
        raise InvalidName(f"namespace {text!r} is not tenant/namespace")
    return check_name("tenant", parts[0]), check_name("namespace", parts[1])

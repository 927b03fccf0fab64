"""Names of the data model: tenant / namespace / topic, partitions 0..N-1."""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.errors import InvalidName

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"

# Kafka's legal topic characters; tenants and namespaces follow the same rule so every name is
# also a safe metadata path component.
_LEGAL = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def check_name(kind: str, name: str) -> str:
    if not _LEGAL.match(name) or name in (".", ".."):
        raise InvalidName(f"illegal {kind} name {name!r}: use 1-249 of [A-Za-z0-9._-]")
    return name


@dataclass(frozen=True, slots=True, order=True)
class TopicName:
    tenant: str
    namespace: str
    topic: str

    @classmethod
    def of(cls, topic: str, tenant: str = DEFAULT_TENANT, namespace: str = DEFAULT_NAMESPACE) -> "TopicName":
        return cls(check_name("tenant", tenant), check_name("namespace", namespace), check_name("topic", topic))

    @property
    def path(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.topic}"

    def partition_log(self, partition: int) -> str:
        return f"{self.path}/{partition}"

    def __str__(self) -> str:
        return self.path

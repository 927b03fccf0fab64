"""Bundles: a namespace's partitions, groups and transactional ids split into hash ranges.

Ownership is per bundle, not per partition, so a million topics cost BUNDLES_PER_NAMESPACE leases per
namespace, as Pulsar's namespace bundles do. Bundle i of a namespace holds every key whose 32-bit
CRC lies in [i * 2^32 / N, (i + 1) * 2^32 / N). A key never changes bundle while N is fixed. A
partition's key is its topic and index, or those of the topic it is placed with (PLACED_WITH).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

BUNDLES_PER_NAMESPACE = 16


@dataclass(frozen=True, slots=True, order=True)
class Bundle:
    tenant: str
    namespace: str
    index: int

    @property
    def path(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.index}"

    @classmethod
    def parse(cls, path: str) -> "Bundle":
        tenant, namespace, index = path.split("/")
        return cls(tenant, namespace, int(index))

    def __str__(self) -> str:
        return self.path


def bundle_of(tenant: str, namespace: str, key: str) -> Bundle:
    return Bundle(tenant, namespace, (zlib.crc32(key.encode()) * BUNDLES_PER_NAMESPACE) >> 32)


# Topics written together by one owner: a namespace's delayed-message store keeps its index in the
# bundle of its messages (core/delayed/store.py), so whoever serves one serves both.
PLACED_WITH = {"__delayed_index": "__delayed_messages"}


def partition_bundle(tenant: str, namespace: str, topic: str, index: int) -> Bundle:
    return bundle_of(tenant, namespace, f"{PLACED_WITH.get(topic, topic)}-partition-{index}")


def group_bundle(tenant: str, namespace: str, group_id: str) -> Bundle:
    """Where a consumer group's coordinator lives."""
    return bundle_of(tenant, namespace, f"group:{group_id}")


def transaction_bundle(tenant: str, namespace: str, transactional_id: str) -> Bundle:
    """Where a transactional id's coordinator lives."""
    return bundle_of(tenant, namespace, f"transaction:{transactional_id}")


def namespace_bundles(tenant: str, namespace: str) -> list[Bundle]:
    return [Bundle(tenant, namespace, index) for index in range(BUNDLES_PER_NAMESPACE)]

"""Bundles: a namespace's partitions, groups and transactional ids split into hash ranges.

Ownership is per bundle, not per partition, so a million topics cost a few leases per namespace, as
Pulsar's namespace bundles do. A key (a partition's topic and index, `group:<id>`,
`transaction:<id>`) hashes to its 32-bit CRC; a bundle holds the keys whose hash lies in
[lower, upper). A namespace starts with BUNDLES_PER_NAMESPACE equal ranges; a busy bundle is split
in two (BrokerCluster.split), so its halves can go to different brokers. A partition's key is that
of the topic it is placed with, if any (PLACED_WITH).

The layouts (where each namespace's ranges end) live in the metadata store, in one node:

    /cluster/layouts   {"<t>/<ns>": [inner boundaries, ascending]}   namespaces never split are absent

Every broker follows that node (BrokerCluster reads it at every step and on a watch) and this
module keeps the layouts as last read, for every part of the process that asks which bundle a key
is in. A broker whose view is a moment old asks the wrong broker and gets NotOwner, as after a
move; it never serves the wrong range, because a bundle is taken only when it is in the layout
read after its lease was created and no other lease overlaps it (BrokerCluster._acquire).
"""

from __future__ import annotations

import bisect
import functools
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

HASH_SPACE = 1 << 32
BUNDLES_PER_NAMESPACE = 16      # what a namespace starts with (Pulsar's defaultNumberOfNamespaceBundles is 4)
LAYOUTS = "/cluster/layouts"


def key_hash(key: str) -> int:
    return zlib.crc32(key.encode())


def partition_key(topic: str, index: int) -> str:
    return f"{PLACED_WITH.get(topic, topic)}-partition-{index}"


def group_key(group_id: str) -> str:
    return f"group:{group_id}"


def transaction_key(transactional_id: str) -> str:
    return f"transaction:{transactional_id}"


# Topics written together by one owner: a namespace's delayed-message store keeps its index in the
# bundle of its messages (core/delayed/store.py), so whoever serves one serves both.
PLACED_WITH = {"__delayed_index": "__delayed_messages"}


@dataclass(frozen=True, slots=True, order=True)
class Bundle:
    tenant: str
    namespace: str
    lower: int      # the first hash it holds
    upper: int      # the first hash above it that it does not hold

    @property
    def path(self) -> str:
        return f"{self.tenant}/{self.namespace}/0x{self.lower:08x}_0x{self.upper:08x}"

    @classmethod
    def parse(cls, path: str) -> "Bundle":
        """From `path`, or from the `<t>/<ns>/<i>` of earlier versions (bundle i of the first layout)."""
        tenant, namespace, hashes = path.split("/")
        if "_" not in hashes:
            return first_layout(tenant, namespace)[int(hashes)]
        lower, upper = (int(bound, 16) for bound in hashes.split("_"))
        if not 0 <= lower < upper <= HASH_SPACE:
            raise ValueError(f"not a bundle: {path}")
        return cls(tenant, namespace, lower, upper)

    def holds(self, tenant: str, namespace: str, key: str) -> bool:
        return (tenant, namespace) == (self.tenant, self.namespace) and self.lower <= key_hash(key) < self.upper

    def holds_partition(self, tenant: str, namespace: str, topic: str, index: int) -> bool:
        return self.holds(tenant, namespace, partition_key(topic, index))

    def overlaps(self, other: "Bundle") -> bool:
        return ((self.tenant, self.namespace) == (other.tenant, other.namespace)
                and self.lower < other.upper and other.lower < self.upper)

    def halves(self, at: int) -> tuple["Bundle", "Bundle"]:
        if not self.lower < at < self.upper:
            raise ValueError(f"{at:#x} is not inside bundle {self}")
        return (Bundle(self.tenant, self.namespace, self.lower, at),
                Bundle(self.tenant, self.namespace, at, self.upper))

    def __str__(self) -> str:
        return self.path


def first_layout(tenant: str, namespace: str) -> list[Bundle]:
    step = HASH_SPACE // BUNDLES_PER_NAMESPACE
    return [Bundle(tenant, namespace, i * step, (i + 1) * step) for i in range(BUNDLES_PER_NAMESPACE)]


class Layouts:
    """Every namespace's bundles: the first layout unless `splits` gives its inner boundaries."""

    def __init__(self, splits: Mapping[str, Sequence[int]] | None = None) -> None:
        self._inner = {namespace: tuple(bounds) for namespace, bounds in (splits or {}).items()}

    def _bounds(self, tenant: str, namespace: str) -> tuple[int, ...]:
        inner = self._inner.get(f"{tenant}/{namespace}")
        if inner is None:
            step = HASH_SPACE // BUNDLES_PER_NAMESPACE
            inner = tuple(i * step for i in range(1, BUNDLES_PER_NAMESPACE))
        return (0, *inner, HASH_SPACE)

    def bundles(self, tenant: str, namespace: str) -> list[Bundle]:
        bounds = self._bounds(tenant, namespace)
        return [Bundle(tenant, namespace, lower, upper) for lower, upper in zip(bounds, bounds[1:])]

    def bundle_at(self, tenant: str, namespace: str, hashed: int) -> Bundle:
        bounds = self._bounds(tenant, namespace)
        i = bisect.bisect_right(bounds, hashed) - 1
        return Bundle(tenant, namespace, bounds[i], bounds[i + 1])

    def split(self, bundle: Bundle, at: int) -> "Layouts":
        """These layouts with `bundle` cut in two at hash `at` (ValueError if it is not a bundle now)."""
        if bundle not in self.bundles(bundle.tenant, bundle.namespace):
            raise ValueError(f"{bundle} is not a bundle of the current layout")
        bundle.halves(at)   # checks `at`
        inner = sorted({*self._bounds(bundle.tenant, bundle.namespace)[1:-1], at})
        return Layouts({**self._inner, f"{bundle.tenant}/{bundle.namespace}": inner})

    def as_dict(self) -> dict[str, list[int]]:
        """What the layouts node holds (the constructor takes it back)."""
        return {ns: list(bounds) for ns, bounds in sorted(self._inner.items())}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Layouts) and self._inner == other._inner


_followed = Layouts()


def follow(layouts: Layouts) -> None:
    """Use `layouts` from now on in this process (BrokerCluster, as it reads them from the store)."""
    global _followed
    if layouts != _followed:
        _followed = layouts
        bundle_of.cache_clear()


@functools.lru_cache(maxsize=1 << 16)    # a hash and a bisect per lookup, on paths that ask per request
def bundle_of(tenant: str, namespace: str, key: str) -> Bundle:
    return _followed.bundle_at(tenant, namespace, key_hash(key))


def partition_bundle(tenant: str, namespace: str, topic: str, index: int) -> Bundle:
    return bundle_of(tenant, namespace, partition_key(topic, index))


def group_bundle(tenant: str, namespace: str, group_id: str) -> Bundle:
    """Where a consumer group's coordinator lives."""
    return bundle_of(tenant, namespace, group_key(group_id))


def transaction_bundle(tenant: str, namespace: str, transactional_id: str) -> Bundle:
    """Where a transactional id's coordinator lives."""
    return bundle_of(tenant, namespace, transaction_key(transactional_id))


def namespace_bundles(tenant: str, namespace: str) -> list[Bundle]:
    return _followed.bundles(tenant, namespace)

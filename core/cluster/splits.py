"""Splitting bundles: when a bundle is split, where, and the operators' requests to split one.

    /cluster/splits   {"<t>/<ns>/<lower>_<upper>": hash to split at, or null}   requests to the owner

A split is carried out by the bundle's owner (BrokerCluster.split), the only broker that can close
what the bundle serves before its halves are taken. An operator's request (the admin API) is left in
the node above, which every broker watches; the owner splits and removes it (so does any broker
that finds it names no bundle of the layout any more).

The owner splits a bundle of its own accord, as Pulsar's bundle split task does (its defaults are
the limits here), when over the last report interval it took more than `messages_per_s` messages or
`bytes_per_s` bytes, and its namespace has fewer than `max_bundles` bundles.

Where: the hash that gives each half about half of the traffic of the bundle's partitions open on
the owner (Pulsar's flow-or-QPS divide). A busy bundle whose traffic is all one partition's is not
split (Pulsar's splitter skips a bundle of one topic too): halves would not spread it. An operator's
request without a hash splits there, else in the middle of the range (Pulsar's range-equally divide).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from core.cluster.bundles import Bundle
from core.cluster.json_nodes import read_json, update_json
from storage.api import MetadataStore

SPLITS = "/cluster/splits"
MESSAGES_PER_S = 30_000.0           # Pulsar's loadBalancerNamespaceBundleMaxMsgRate
BYTES_PER_S = 100.0 * (1 << 20)     # its loadBalancerNamespaceBundleMaxBandwidthMbytes
MAX_BUNDLES = 128                   # its loadBalancerNamespaceMaximumBundles


@dataclass(frozen=True, slots=True)
class SplitLimits:
    messages_per_s: float = MESSAGES_PER_S     # 0: never split of its own accord
    bytes_per_s: float = BYTES_PER_S
    max_bundles: int = MAX_BUNDLES

    def over(self, messages_per_s: float, bytes_per_s: float) -> bool:
        return self.messages_per_s > 0 and (messages_per_s > self.messages_per_s or bytes_per_s > self.bytes_per_s)


def traffic_split(weighted: Iterable[tuple[int, float]]) -> int | None:
    """The hash to split `bundle` at so that each half gets about half the weight of the (hash,
    weight) pairs given; None if fewer than two hashes carry weight."""
    by_hash: dict[int, float] = {}
    for hashed, weight in weighted:
        by_hash[hashed] = by_hash.get(hashed, 0.0) + weight
    hashes = sorted(hashed for hashed, weight in by_hash.items() if weight > 0)
    if len(hashes) < 2:
        return None
    total, below = sum(by_hash.values()), 0.0
    for i, hashed in enumerate(hashes[:-1]):
        below += by_hash[hashed]
        if below * 2 >= total:
            return hashes[i + 1]     # the lower half ends just below the next key
    return hashes[-1]


async def request_split(metadata: MetadataStore, bundle: Bundle, at: int | None) -> None:
    if at is not None:
        bundle.halves(at)     # ValueError if outside
    await update_json(metadata, SPLITS, lambda value: {**(value or {}), bundle.path: at})


async def read_split_requests(metadata: MetadataStore) -> dict[Bundle, int | None]:
    return {Bundle.parse(path): at for path, at in ((await read_json(metadata, SPLITS)) or {}).items()}


async def drop_split_requests(metadata: MetadataStore, bundles: Iterable[Bundle]) -> None:
    paths = {bundle.path for bundle in bundles}
    if paths:
        await update_json(metadata, SPLITS,
                          lambda value: {path: at for path, at in (value or {}).items() if path not in paths})

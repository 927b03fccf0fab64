"""Kafka transactions on a cluster of brokers: what it costs when a transaction's partitions are owned
by other brokers than its coordinator (markers through their mailboxes, core/cluster/mailbox.py)
against a transaction whose partitions its coordinator owns, in one run on one cluster.

`gateway cluster up` as a library: ZooKeeper, 3 bookies (E3-Qw3-Qa2), 3 brokers. One transactional
confluent-kafka producer per case writes one record to each partition of the case and commits; the
figure is the commit's latency (EndTxn, markers included), p50 / p99, and the ratio between cases.

    python -m bench.cluster_transactions [--transactions 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from core.cluster.bundles import partition_bundle, transaction_bundle
from gateway.cluster.launcher import ClusterSpec, LocalCluster
from storage.metadata.zookeeper import ZooKeeperMetadataStore

PARTITIONS = 24


async def _holders(cluster: LocalCluster, bundles) -> list[int | None]:
    store = await ZooKeeperMetadataStore.open(cluster.metadata_url)
    try:
        found = []
        for bundle in bundles:
            node = await store.get(f"/cluster/leases/{bundle.path}")
            found.append(None if node is None else json.loads(node.value)["broker"])
        return found
    finally:
        await store.close()


def _commit_latencies(bootstrap: str, transactional_id: str, topic: str, partitions: list[int],
                      count: int) -> list[float]:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 0})
    producer.init_transactions(30)
    latencies = []
    for n in range(count):
        producer.begin_transaction()
        for partition in partitions:
            producer.produce(topic, b"x" * 100, partition=partition)
        producer.flush(30)
        started = time.perf_counter()
        producer.commit_transaction(30)
        latencies.append(time.perf_counter() - started)
    return latencies


def _summary(latencies: list[float]) -> dict:
    ordered = sorted(latencies)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 2),
            "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1000, 2), "count": len(ordered)}


def run(transactions: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-cluster-txn-") as directory:
        cluster = LocalCluster(ClusterSpec(data_dir=Path(directory), bookies=3, brokers=3, log_level="warning"))
        ready = cluster.start()
        try:
            bootstrap = ",".join(broker["kafka"] for broker in ready["brokers"])
            topic = f"txn-bench-{uuid.uuid4().hex[:8]}"
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
            deadline = time.monotonic() + 60
            while True:
                owners = asyncio.run(_holders(cluster, [partition_bundle("public", "default", topic, p)
                                                        for p in range(PARTITIONS)]))
                if None not in owners or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            transactional_id = f"bench-{topic}"
            coordinator, = asyncio.run(_holders(cluster, [transaction_bundle("public", "default", transactional_id)]))
            local = [p for p, owner in enumerate(owners) if owner == coordinator][:3]
            remote = [p for p, owner in enumerate(owners) if owner != coordinator][:3]
            if len(local) < 3 or len(remote) < 3:
                raise SystemExit(f"the partitions did not spread over the brokers: {owners}")
            results = {}
            for case, partitions in (("coordinator's own partitions", local), ("other brokers' partitions", remote)):
                _commit_latencies(bootstrap, f"{transactional_id}-warm-{case[:5]}", topic, partitions, 10)
                results[case] = _summary(_commit_latencies(bootstrap, transactional_id, topic, partitions,
                                                           transactions))
            results["ratio_p50"] = round(results["other brokers' partitions"]["p50_ms"]
                                         / results["coordinator's own partitions"]["p50_ms"], 2)
            return results
        finally:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = run(args.transactions)
    print(json.dumps(results, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

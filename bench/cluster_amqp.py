"""AMQP through any broker of a cluster: what it costs to publish to and consume from a queue through
a broker that does not serve it (forwarded over the peer link, core/queues/forwarding.py and
core/queues/remote_subscription.py) against doing both at the broker that serves it, in one run on
one cluster.

`gateway cluster up` as a library: ZooKeeper, 3 bookies (E3-Qw3-Qa2), 3 brokers. Per case, pika
publishes `--messages` persistent 1 KiB messages with confirms (100 in flight, as bench.amqp) and
then consumes them (prefetch 100, one ack each); the figures are msg/s and the CPU the brokers
used per message (the serving broker and, when forwarded, the one in between).

    python -m bench.cluster_amqp [--messages 20000] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from pathlib import Path

import pika
import psutil

from bench.amqp import MESSAGE_BYTES, Broker, Publisher, Receiver
from bench.cluster_transactions import _holders
from core.cluster.bundles import partition_bundle
from gateway.cluster.launcher import ClusterSpec, LocalCluster

WINDOW = 100


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def _case(through: Broker, queue: str, count: int, pids: list[int]) -> dict:
    connection = pika.BlockingConnection(through.parameters())
    connection.channel().queue_declare(queue, durable=True)
    connection.close()
    results = {}
    for phase, client in (("publish", Publisher(through.parameters(), queue, count, WINDOW, b"x" * MESSAGE_BYTES)),
                          ("consume", Receiver(through.parameters(), queue, count))):
        cpu = _cpu(pids)
        client.run()
        if client.error:
            raise SystemExit(f"{phase} through {through.name}: {client.error}")
        done = client.confirmed if phase == "publish" else client.received
        seconds = (client.ended or time.perf_counter()) - client.started
        results[phase] = {"msg_per_s": round(done / seconds), "broker_cpu_us_per_msg":
                          round((_cpu(pids) - cpu) / max(done, 1) * 1e6, 1)}
    return results


def run(messages: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-cluster-amqp-") as directory:
        cluster = LocalCluster(ClusterSpec(data_dir=Path(directory), bookies=3, brokers=3, log_level="warning"))
        ready = cluster.start()
        try:
            brokers = []
            for index, broker in enumerate(ready["brokers"]):
                host, _, port = broker["amqp"].rpartition(":")
                brokers.append(Broker(f"broker-{index}", host, int(port), broker["pid"], None))
            names = [f"bench-{uuid.uuid4().hex[:8]}-{i}" for i in range(48)]
            deadline, before = time.monotonic() + 90, None
            while True:     # until the leader has spread the bundles and they stay put
                owners = asyncio.run(_holders(cluster, [partition_bundle("public", "default", n, 0) for n in names]))
                if (owners == before and len(set(owners) - {None}) == len(brokers)) or time.monotonic() > deadline:
                    break
                before = owners
                time.sleep(2)
            served = [(n, o) for n, o in zip(names, owners) if o is not None]
            (direct, owner), forwarded = served[0], next(n for n, o in served[1:] if o == served[0][1])
            middle = next(i for i in range(len(brokers)) if i != owner)
            results = {
                "at the serving broker": _case(brokers[owner], direct, messages, [brokers[owner].pid]),
                "through another broker": _case(brokers[middle], forwarded, messages,
                                                [brokers[owner].pid, brokers[middle].pid]),
            }
            for phase in ("publish", "consume"):
                results[f"{phase}_ratio"] = round(results["through another broker"][phase]["msg_per_s"]
                                                  / results["at the serving broker"][phase]["msg_per_s"], 2)
            return results
        finally:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = run(args.messages)
    print(json.dumps(results, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

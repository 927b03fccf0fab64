"""Read-only brokers taking a consumer fan-out off the owner, in one run.

Setup: `gateway cluster up` as a library: ZooKeeper, 3 bookies (E3 Qw3 Qa2), one serving broker
(the owner of every partition) and one read-only broker in a rack of its own. A producer sends
`--rate` messages a second of 1 KiB, each carrying its send time, for `--seconds`, while
`--consumers` confluent-kafka consumers (assign, read_uncommitted) tail the topic: first reading
from the owner, then with `client.rack` set to the read-only broker's rack, so that the owner sends
them there (KIP-392). Per mode: each broker's CPU over the phase, and the end-to-end latency
(arrival - send) over every consumer's messages, p50 and p99.

    python -m bench.read_replicas [--consumers 50] [--rate 200] [--seconds 15] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.kafka import _STAMP, MESSAGE_BYTES, Latency, cpu_seconds
from gateway.cluster.launcher import ClusterSpec, LocalCluster

PARTITIONS = 4
READERS_RACK = "/rack-readers"


@dataclass
class ModeResult:
    mode: str
    owner_cpu_s: float
    reader_cpu_s: float
    latency: Latency


def run_mode(cluster: LocalCluster, mode: str, consumers: int, rate: int, seconds: float) -> ModeResult:
    owner, reader = (psutil.Process(broker.pid) for broker in cluster.brokers)
    bootstrap = cluster.brokers[0].ready["kafka"]
    topic = f"fanout-{mode.replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    extra = {"client.rack": READERS_RACK} if mode == "read-only broker" else {}
    delays: list[list[int]] = [[] for _ in range(consumers)]
    stop = threading.Event()
    started = threading.Barrier(consumers + 1)

    def consume(index: int) -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fanout-{index}",
                             "enable.auto.commit": False, "isolation.level": "read_uncommitted",
                             "fetch.wait.max.ms": 100, **extra})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        consumer.poll(0.1)
        started.wait()
        while not stop.is_set():
            message = consumer.poll(0.1)
            if message is not None and message.error() is None and message.value():
                delays[index].append(time.perf_counter_ns() - _STAMP.unpack_from(message.value())[0])
        consumer.close()

    threads = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(consumers)]
    for thread in threads:
        thread.start()
    started.wait()
    time.sleep(3)            # consumers settled on their broker (a redirect takes a metadata round)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 1})
    filler = b"x" * (MESSAGE_BYTES - _STAMP.size)
    for lists in delays:
        lists.clear()
    owner_cpu, reader_cpu = cpu_seconds(owner), cpu_seconds(reader)
    total = int(rate * seconds)
    start = time.perf_counter()
    for n in range(total):
        pause = start + n / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        producer.produce(topic, _STAMP.pack(time.perf_counter_ns()) + filler, partition=n % PARTITIONS)
        producer.poll(0)
    producer.flush(30)
    time.sleep(1)            # the last ones arrive
    owner_cpu, reader_cpu = cpu_seconds(owner) - owner_cpu, cpu_seconds(reader) - reader_cpu
    stop.set()
    for thread in threads:
        thread.join(10)
    return ModeResult(mode, owner_cpu, reader_cpu, Latency.of(total * consumers, [d for lst in delays for d in lst]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--consumers", type=int, default=50)
    parser.add_argument("--rate", type=int, default=200, help="messages per second produced")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as work:
        cluster = LocalCluster(ClusterSpec(data_dir=Path(work), bookies=3, brokers=1, read_only_brokers=1,
                                           read_only_rack=READERS_RACK, ensemble=3, write_quorum=3, ack_quorum=2,
                                           log_level="warning"))
        cluster.start()
        try:
            results = [run_mode(cluster, mode, args.consumers, args.rate, args.seconds)
                       for mode in ("owner", "read-only broker")]
        finally:
            cluster.stop()
    print(f"{args.consumers} consumers, {args.rate} msg/s for {args.seconds:.0f} s, {PARTITIONS} partitions")
    print("| consumers read from | owner CPU s | read-only broker CPU s | received | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|")
    for result in results:
        latency = result.latency
        print(f"| {result.mode} | {result.owner_cpu_s:.2f} | {result.reader_cpu_s:.2f} | "
              f"{latency.received}/{latency.sent} | {latency.p50_ms:.1f} | {latency.p99_ms:.1f} |")
    owner, offloaded = results
    if owner.owner_cpu_s:
        print(f"owner CPU with the read-only broker / without: {offloaded.owner_cpu_s / owner.owner_cpu_s:.2f}; "
              f"p99 {offloaded.latency.p99_ms / owner.latency.p99_ms:.2f}x")
    if args.json:
        args.json.write_text(json.dumps([asdict(result) for result in results], indent=2))


if __name__ == "__main__":
    main()

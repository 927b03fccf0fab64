"""Three brokers against one, on the same three bookies, in one run.

Each setup is `gateway cluster up` as a library (ZooKeeper, 3 `gateway bookie` processes, E3-Qw2-Qa2,
then 1 or 3 `gateway serve`). A topic of 12 partitions spreads over the brokers by bundle. N client
processes (confluent-kafka, acks=all, idempotent, 1 KiB) produce together, then N consume together
(each its share of the partitions); reported: aggregate msg/s, the CPU of the whole cluster per
million messages, and the produce p99 at a fixed rate. Every process shares this machine's cores,
so three brokers can only help as far as one broker leaves cores idle: read the ratio, not the
absolute figures.

    python -m bench.broker_scaling [--clients 4] [--messages 200000] [--rate 2000] [--brokers 1,3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.kafka import (MESSAGE_BYTES, Latency, consumer_config, create_topics_admin, measure_latency,
                         producer_config)
from gateway.cluster.launcher import ClusterSpec, LocalCluster

PARTITIONS = 12
TOPIC = "scaling"


@dataclass
class Result:
    brokers: int
    produce_msgs_per_s: float
    consume_msgs_per_s: float
    produce_cpu_s_per_million: float
    latency: Latency
    errors: list[str]


def _produce(bootstrap: str, count: int, first: int, out) -> None:
    producer = Producer(producer_config(bootstrap, "none"))
    producer.list_topics(TOPIC, timeout=30)
    payload = b"x" * MESSAGE_BYTES
    failed = []
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(TOPIC, payload, partition=(first + i) % PARTITIONS,
                                 on_delivery=lambda e, m: e is None or failed.append(e))
                break
            except BufferError:
                producer.poll(0.005)
        if not i & 1023:
            producer.poll(0)
    left = producer.flush(180)
    out.put((start, time.perf_counter(), count - left - len(failed)))


def _consume(bootstrap: str, partitions: list[int], count: int, out) -> None:
    consumer = Consumer(consumer_config(bootstrap))
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in partitions])
    received, deadline = 0, time.monotonic() + 180
    start = time.perf_counter()
    while received < count and time.monotonic() < deadline:
        received += sum(1 for m in consumer.consume(10_000, timeout=1.0) if m.error() is None)
    out.put((start, time.perf_counter(), received))
    consumer.close()


def _together(target, arguments: list[tuple]) -> tuple[float, int]:
    """Run one process per argument tuple at once; (wall seconds from first start to last end, total)."""
    out = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=target, args=(*args, out)) for args in arguments]
    for worker in workers:
        worker.start()
    reports = [out.get(timeout=300) for _ in workers]
    for worker in workers:
        worker.join(30)
    return max(r[1] for r in reports) - min(r[0] for r in reports), sum(r[2] for r in reports)


def cpu(pids: list[int]) -> float:
    return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids)


def run(brokers: int, work: Path, args: argparse.Namespace) -> Result:
    errors: list[str] = []
    cluster = LocalCluster(ClusterSpec(data_dir=work / f"brokers-{brokers}", bookies=3, brokers=brokers,
                                       ensemble=3, write_quorum=2, ack_quorum=2, log_level="warning"))
    ready = cluster.start()
    try:
        bootstrap = ",".join(b["kafka"] for b in ready["brokers"])
        pids = [b["pid"] for b in ready["bookies"]] + [b["pid"] for b in ready["brokers"]]
        create_topics_admin(bootstrap, {TOPIC: PARTITIONS, "scaling-latency": PARTITIONS})
        per_client = args.messages // args.clients
        cpu0 = cpu(pids)
        seconds, produced = _together(_produce, [(bootstrap, per_client, c) for c in range(args.clients)])
        produce_cpu = cpu(pids) - cpu0
        if produced < per_client * args.clients:
            errors.append(f"produced {produced} of {per_client * args.clients}")
        shares = [[p for p in range(PARTITIONS) if p % args.clients == c] for c in range(args.clients)]
        consume_s, consumed = _together(_consume, [(bootstrap, share, produced * len(share) // PARTITIONS)
                                                   for share in shares])
        if consumed < produced:
            errors.append(f"consumed {consumed} of {produced}")
        latency = measure_latency(bootstrap, "scaling-latency", PARTITIONS, args.rate, args.seconds, 5,
                                  psutil.Process(ready["brokers"][0]["pid"]), errors)
        return Result(brokers, produced / seconds, consumed / consume_s, produce_cpu / max(produced, 1) * 1e6,
                      latency, errors)
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=2000, help="latency phase: messages per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="latency phase: duration")
    parser.add_argument("--brokers", default="1,3", type=lambda s: [int(n) for n in s.split(",")],
                        help="broker counts, one setup each; the first is the one the others are compared with")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="broker-scaling-") as tmp:
        results = [run(brokers, Path(tmp), args) for brokers in args.brokers]
    print(json.dumps([asdict(r) for r in results], indent=2))
    first = results[0]
    print(f"\n{args.clients} clients, {args.messages} x 1 KiB over {PARTITIONS} partitions, 3 bookies E3-Qw2-Qa2")
    for r in results:
        print(f"  {r.brokers} broker(s): produce {r.produce_msgs_per_s:,.0f} msg/s, consume {r.consume_msgs_per_s:,.0f} "
              f"msg/s, cluster CPU {r.produce_cpu_s_per_million:.0f} s per million produced, p99 at "
              f"{args.rate}/s {r.latency.p99_ms:.1f} ms" + ("".join(f"\n    ! {e}" for e in r.errors)))
    for r in results[1:]:
        print(f"  {r.brokers} brokers / {first.brokers}: produce {r.produce_msgs_per_s / first.produce_msgs_per_s:.2f}x, "
              f"consume {r.consume_msgs_per_s / first.consume_msgs_per_s:.2f}x")


if __name__ == "__main__":
    main()

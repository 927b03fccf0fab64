"""Pulsar's official client against the gateway, beside the Kafka path of the same gateway in the
same run: produce throughput (batching on), consume throughput, end-to-end latency, and the
gateway's CPU time per message of each.

    python -m bench.pulsar [--messages N] [--size BYTES] [--latency-samples N]   (make bench-pulsar)

There is no Pulsar broker to run here; docs/PERFORMANCE.md quotes Pulsar's published figures as the
outside anchor. This measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psutil
import pulsar
from confluent_kafka import Consumer, Producer

from bench.reference import start_gateway

TIMEOUT_MS = 30_000


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def _phase(name: str, count: int, gateway: psutil.Process, run) -> dict:
    cpu = _cpu(gateway)
    start = time.perf_counter()
    run()
    elapsed = time.perf_counter() - start
    used = _cpu(gateway) - cpu
    result = {"phase": name, "msgs_per_s": count / elapsed, "gateway_cpu_us_per_msg": used / count * 1e6}
    print(f"{name:<24} {result['msgs_per_s']:>10.0f} msg/s   gateway CPU {result['gateway_cpu_us_per_msg']:>7.1f} µs/msg")
    return result


def pulsar_runs(address: str, gateway: psutil.Process, count: int, size: int, samples: int) -> list[dict]:
    client = pulsar.Client(f"pulsar://{address}", logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    topic = f"bench-pulsar-{uuid.uuid4().hex[:8]}"
    payload = b"x" * size
    consumer = client.subscribe(topic, "bench", consumer_type=pulsar.ConsumerType.Exclusive,
                                initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=1000)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                      batching_max_publish_delay_ms=5, max_pending_messages=10_000,
                                      block_if_queue_full=True)

    def produce() -> None:
        for _ in range(count):
            producer.send_async(payload, None)
        producer.flush()

    def consume() -> None:
        for _ in range(count):
            consumer.acknowledge(consumer.receive(TIMEOUT_MS))

    results = [_phase("pulsar produce", count, gateway, produce), _phase("pulsar consume", count, gateway, consume)]
    single = client.create_producer(topic, batching_enabled=False)    # a batching producer waits for its batch
    latencies = []
    for _ in range(samples):
        sent = time.perf_counter()
        single.send(payload)
        consumer.acknowledge(consumer.receive(TIMEOUT_MS))
        latencies.append((time.perf_counter() - sent) * 1000)
    results.append(_latency("pulsar end-to-end", latencies))
    client.close()
    return results


def kafka_runs(bootstrap: str, gateway: psutil.Process, count: int, size: int, samples: int) -> list[dict]:
    topic = f"bench-kafka-{uuid.uuid4().hex[:8]}"
    payload = b"x" * size
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest",
                         "enable.auto.commit": True})

    def produce() -> None:
        for _ in range(count):
            while True:
                try:
                    producer.produce(topic, payload)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush(TIMEOUT_MS / 1000)

    def consume() -> None:
        got = 1
        while got < count:
            got += sum(1 for record in consumer.consume(1000, 5.0) if record.error() is None)

    results = [_phase("kafka produce", count, gateway, produce)]
    consumer.subscribe([topic])
    first = None
    while first is None or first.error() is not None:    # the group's join is not part of the run
        first = consumer.poll(10.0)
    results.append(_phase("kafka consume", count, gateway, consume))
    latencies = []
    for _ in range(samples):
        sent = time.perf_counter()
        producer.produce(topic, payload)
        producer.flush(TIMEOUT_MS / 1000)
        while True:
            record = consumer.poll(5.0)
            if record is not None and record.error() is None:
                break
        latencies.append((time.perf_counter() - sent) * 1000)
    results.append(_latency("kafka end-to-end", latencies))
    consumer.close()
    return results


def _latency(name: str, latencies: list[float]) -> dict:
    latencies.sort()
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    print(f"{name:<24} p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   ({len(latencies)} sends, one at a time)")
    return {"phase": name, "p50_ms": p50, "p99_ms": p99}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--latency-samples", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pulsar-") as work:
        broker = start_gateway(Path(work) / "data", Path(work))
        try:
            process = psutil.Process(broker.pid)
            print(f"{args.messages} messages of {args.size} bytes; gateway pid {broker.pid}")
            pulsar_runs(broker.pulsar, process, args.messages, args.size, args.latency_samples)
            kafka_runs(broker.bootstrap, process, args.messages, args.size, args.latency_samples)
        finally:
            broker.stop()


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()

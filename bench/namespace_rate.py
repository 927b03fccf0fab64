"""Accuracy of a namespace's publish rate limit across Kafka and AMQP together.

One `gateway serve`; the namespace public/default gets `publish_rate_messages` = --rate. Then, at
once and as fast as each goes, a confluent-kafka producer (100-byte messages, unauthenticated, so
it lands in public/default) and a pika publisher (vhost "/", the same namespace) publish for a
warm-up and then --seconds more. Stored messages are counted from the end offsets the admin API
reports (not from the limiter's own meter) at the start and the end of the measured window.

    python -m bench.namespace_rate [--rate 2000] [--seconds 10] [--json out.json]

Prints the measured rate, its error against the limit, and each protocol's share.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.reference import start_gateway

ADMIN = ("bench-admin", "bench-secret")
CONFIG = """
[[users]]
name = "bench-admin"
password = "bench-secret"
tags = ["administrator"]
"""
TOPIC = "rate-kafka"
QUEUE = "rate-amqp"
PAYLOAD = b"x" * 100
WARM_UP_S = 2.0


def _end_offsets(api: httpx.Client, queue_topic: str) -> dict[str, int]:
    ends = {}
    for name, topic in (("kafka", TOPIC), ("amqp", queue_topic)):
        document = api.get(f"/tenants/public/namespaces/default/topics/{topic}").json()
        ends[name] = sum(p["end_offset"] for p in document["partitions"])
    return ends


def measure(admin_url: str, kafka: str, amqp: tuple[str, int], auth: tuple[str, str], rate: int,
            seconds: float) -> dict:
    """Publish over both protocols against a limit of `rate` messages/s; what was stored, per second."""
    import pika
    from confluent_kafka import Producer

    api = httpx.Client(base_url=f"{admin_url}/api/v1", auth=auth, timeout=30)
    api.put("/tenants/public/namespaces/default/policies", json={"publish_rate_messages": rate}).raise_for_status()
    stop = threading.Event()
    blocked = []

    def kafka_producer() -> None:
        # Java's default batch size (librdkafka's is 1 MB): a throttled request's debt stays small.
        producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5, "acks": 1, "batch.size": 16384})
        while not stop.is_set():
            try:
                producer.produce(TOPIC, PAYLOAD)
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
        producer.purge()   # what the limit still holds back is not part of the measurement
        producer.flush(5)

    connection = pika.BlockingConnection(pika.ConnectionParameters(*amqp))
    channel = connection.channel()
    channel.queue_declare(QUEUE)
    is_blocked = threading.Event()
    connection.add_on_connection_blocked_callback(lambda *args: (blocked.append(time.monotonic()), is_blocked.set()))
    connection.add_on_connection_unblocked_callback(lambda *args: is_blocked.clear())

    def amqp_publisher() -> None:
        # As a well-behaved client does: publish until told connection.blocked, then wait for unblocked.
        while not stop.is_set():
            if is_blocked.is_set():
                connection.process_data_events(0.01)
                continue
            for _ in range(50):
                channel.basic_publish("", QUEUE, PAYLOAD)
            connection.process_data_events(0)

    threads = [threading.Thread(target=kafka_producer), threading.Thread(target=amqp_publisher)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:   # the Kafka topic exists once its first message is stored
            if api.get(f"/tenants/public/namespaces/default/topics/{TOPIC}").status_code == 200:
                break
            time.sleep(0.1)
        queue_topic = next(q["topic"] for q in api.get("/tenants/public/namespaces/default/queues").json()
                           if q["name"] == QUEUE)
        time.sleep(WARM_UP_S)
        first, started = _end_offsets(api, queue_topic), time.monotonic()
        time.sleep(seconds)
        last, ended = _end_offsets(api, queue_topic), time.monotonic()
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
        connection.close()
        api.put("/tenants/public/namespaces/default/policies", json={}).raise_for_status()
    elapsed = ended - started
    stored = {name: last[name] - first[name] for name in last}
    measured = sum(stored.values()) / elapsed
    return {"limit": rate, "seconds": round(elapsed, 2), "measured_rate": round(measured, 1),
            "error_percent": round(100 * (measured - rate) / rate, 2),
            "per_protocol_rate": {name: round(count / elapsed, 1) for name, count in stored.items()},
            "amqp_blocked_notices": len(blocked)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=2000, help="messages per second for the namespace")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-rate-") as tmp:
        config = Path(tmp) / "gateway.toml"
        config.write_text(CONFIG)
        broker = start_gateway(Path(tmp) / "data", Path(tmp), extra_args=("--config", str(config)))
        try:
            result = measure(f"http://{broker.admin}", broker.bootstrap, _host_port(broker.amqp), ADMIN,
                             args.rate, args.seconds)
        finally:
            broker.stop()
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


if __name__ == "__main__":
    sys.exit(main())

"""Geo-replication lag under steady load: two gateways on this machine, the source with a
[[replication]] link to the remote (protocols/kafka/mirror).

A producer sends stamped 1 KB messages to the source at a fixed rate; one consumer reads them on
the source, another on the remote's mirror topic. Reported: delivery latency (arrival - send) on
each side, so the difference is what the copy adds, the largest lag the source's /metrics showed
(records not yet on the remote), and the source's CPU per message with the link against a run
without it. The machine is shared and noisy: compare the two sides of one run, not runs.

    python -m bench.geo_replication [--rate 2000] [--seconds 20] [--partitions 3]
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path

import psutil
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.kafka import (_STAMP, MESSAGE_BYTES, Latency, consumer_config, cpu_seconds, create_topics_admin,
                         producer_config, send_stamped)
from bench.reference import RunningBroker, start_gateway

TOPIC = "geo-bench"
_LAG = re.compile(r'^gateway_replication_lag_records\{[^}]*\} (\S+)$', re.M)


def start(work: Path, name: str, *args: str) -> RunningBroker:
    (work / name).mkdir(parents=True)
    return start_gateway(work / name / "data", work / name, args)


class Receiver:
    """Stamped messages arriving at one cluster: arrival - send, per message."""

    def __init__(self, bootstrap: str, partitions: int) -> None:
        self.delays_ns: list[int] = []
        self.warm = threading.Event()     # a warm-up message arrived: the path is open end to end
        self._consumer = Consumer(consumer_config(bootstrap))
        self._consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self._consumer.poll(0.05)
            now = time.perf_counter_ns()
            if message is None or message.error() is not None:
                continue
            if message.value()[:1] == b"T":
                self.delays_ns.append(now - _STAMP.unpack_from(message.value(), 1)[0])
            else:
                self.warm.set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def max_lag(admin: str, stop: threading.Event, seen: list[float]) -> None:
    while not stop.is_set():
        try:
            text = urllib.request.urlopen(f"http://{admin}/metrics", timeout=5).read().decode()
            seen.append(sum(float(v) for v in _LAG.findall(text)))
        except OSError:
            pass
        stop.wait(0.5)


def run(rate: int, seconds: float, partitions: int, linked: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="geo-bench-") as tmp:
        work = Path(tmp)
        remote = start(work, "remote")
        config = work / "source.toml"
        config.write_text(f'[[replication]]\nname = "bench"\nremote = "{remote.bootstrap}"\n' if linked else "")
        source = start(work, "source", "--config", str(config))
        try:
            create_topics_admin(source.bootstrap, {TOPIC: partitions})
            here = Receiver(source.bootstrap, partitions)
            there = Receiver(remote.bootstrap, partitions) if linked else None
            lags: list[float] = []
            stop = threading.Event()
            sampler = threading.Thread(target=max_lag, args=(source.admin, stop, lags), daemon=True)
            sampler.start()
            producer = Producer(producer_config(source.bootstrap, "none"))
            filler = b"x" * (MESSAGE_BYTES - 9)
            warm_deadline = time.monotonic() + 60    # start-up (and the replicator finding the topic) stays out
            while not all(r.warm.is_set() for r in (here, there) if r is not None) and time.monotonic() < warm_deadline:
                producer.produce(TOPIC, b"W" + filler)
                producer.flush(5)
                time.sleep(0.5)
            process = psutil.Process(source.pid)
            total = int(rate * seconds)
            cpu0 = cpu_seconds(process)
            send_stamped(producer, TOPIC, partitions, total, rate)
            producer.flush(60)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (len(here.delays_ns) < total or
                                                   (there is not None and len(there.delays_ns) < total)):
                time.sleep(0.05)
            cpu = cpu_seconds(process) - cpu0
            stop.set()
            sampler.join(10)
            here.close()
            result = {"rate": rate, "seconds": seconds, "partitions": partitions, "linked": linked,
                      "source": asdict(Latency.of(total, here.delays_ns, cpu))}
            if there is not None:
                there.close()
                result["mirror"] = asdict(Latency.of(total, there.delays_ns))
                result["max_lag_records"] = max(lags, default=float("nan"))
            return result
        finally:
            source.stop()
            remote.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--partitions", type=int, default=3)
    args = parser.parse_args(argv)
    linked = run(args.rate, args.seconds, args.partitions, linked=True)
    alone = run(args.rate, args.seconds, args.partitions, linked=False)
    print(json.dumps({"linked": linked, "alone": alone}, indent=2))
    src, mirror = linked["source"], linked["mirror"]
    print(f"\n{args.rate} msg/s x {args.seconds:.0f} s, {args.partitions} partitions, 1 KB messages")
    print(f"  delivered on the source: p50 {src['p50_ms']:.1f} ms, p99 {src['p99_ms']:.1f} ms "
          f"({src['received']}/{src['sent']})")
    print(f"  delivered on the mirror: p50 {mirror['p50_ms']:.1f} ms, p99 {mirror['p99_ms']:.1f} ms "
          f"({mirror['received']}/{mirror['sent']})")
    print(f"  largest lag seen in /metrics: {linked['max_lag_records']:.0f} records")
    print(f"  source CPU per message with the link / without: "
          f"{src['cpu_us_per_message'] / alone['source']['cpu_us_per_message']:.2f}x")


if __name__ == "__main__":
    main()

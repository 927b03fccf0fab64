"""Kafka produce/consume through a real `gateway serve` process, beside tansu in the same run.

For each broker and each case (1 or 8 partitions × compression none or lz4), with confluent-kafka:
  - produce N messages of 1 KiB (acks=all, enable.idempotence=true), round-robin over the
    partitions, as fast as the producer goes, until every delivery is acknowledged;
  - consume them back from the beginning (assign, no consumer group);
  - the broker process's CPU seconds (psutil, every thread) during each phase, per million messages.
Both brokers run at once and the phases alternate between them (a burst of load from elsewhere on
a shared machine then hits both alike); each case runs --rounds times and the best round counts.
Then, per partition count, end-to-end latency: messages at a fixed rate (2,000/s for 10 s by
default) carrying their send time; the consumer (same process, another thread) notes when each
arrives; p50/p99 of the difference.

The payload is text (words drawn at random, lz4 shrinks it to about half), so lz4 has work to do.
The client runs on the same machine as the broker (2 cores on the reference machine), so the
client's own CPU competes with the broker's: ratios between brokers are the figure to read.

Storage differs: tansu runs with memory storage (no fsync); the gateway fsyncs every acknowledged
batch to its journal.

    python -m bench.kafka [--messages 200000] [--brokers gateway,tansu] [--json out.json]
    python -m bench.kafka --profile-dir DIR   # also py-spy the gateway (raw folded stacks)
    python -m bench.kafka --tls               # also "gateway-tls": the same process through its TLS port

With --tls the gateway gets a Kafka TLS port (a throwaway self-signed certificate, TLS 1.3, no
client certificates) and "gateway-tls" runs every phase through it, into topics of its own, beside
"gateway" on the plaintext port of the same process: the report's "gateway-tls / gateway" rows are
the cost of TLS in the broker's CPU per message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import psutil
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.reference import RunningBroker, start_gateway, start_tansu

MESSAGE_BYTES = 1024
PHASE_DEADLINE_S = 180.0      # bound on any one produce or consume phase
POOL = 4096                   # distinct payloads, cycled
_STAMP = struct.Struct(">q")

CASES = [(1, "none"), (1, "lz4"), (8, "none"), (8, "lz4")]


@dataclass
class Phase:
    messages: int
    seconds: float
    cpu_s: float              # broker process CPU (user + system) during the phase

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.msgs_per_s * MESSAGE_BYTES / 1e6

    @property
    def cpu_s_per_million(self) -> float:
        return self.cpu_s / self.messages * 1e6 if self.messages else 0.0


@dataclass
class Latency:
    sent: int
    received: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    cpu_us_per_message: float = float("nan")   # broker CPU from the first timed send to the last arrival

    @classmethod
    def of(cls, sent: int, delays_ns: list[int], cpu_s: float | None = None) -> "Latency":
        cpu_us = cpu_s / sent * 1e6 if sent and cpu_s is not None else float("nan")
        if not delays_ns:
            return cls(sent, 0, float("nan"), float("nan"), float("nan"), cpu_us)
        ms = sorted(d / 1e6 for d in delays_ns)
        quantiles = statistics.quantiles(ms, n=100, method="inclusive")
        return cls(sent, len(ms), quantiles[49], quantiles[98], ms[-1], cpu_us)


@dataclass
class BrokerResult:
    broker: str
    produce: dict[str, Phase] = field(default_factory=dict)     # case key -> phase
    consume: dict[str, Phase] = field(default_factory=dict)
    latency: dict[int, Latency] = field(default_factory=dict)   # partitions -> latency
    errors: list[str] = field(default_factory=list)


def case_key(partitions: int, compression: str) -> str:
    return f"{partitions}p/{compression}"


def topic_for(partitions: int, compression: str) -> str:
    return f"bench-p{partitions}-{compression}"


def latency_topic(partitions: int) -> str:
    return f"bench-latency-p{partitions}"


def make_payloads(seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(2000)]
    payloads = []
    for _ in range(POOL):
        text = " ".join(rng.choice(words) for _ in range(300)).encode()
        payloads.append(text[:MESSAGE_BYTES].ljust(MESSAGE_BYTES, b"."))
    return payloads


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def producer_config(bootstrap: str, compression: str, linger_ms: int = 5, security: dict | None = None) -> dict:
    return {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "compression.type": compression, "linger.ms": linger_ms,
            "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1 << 20, **(security or {})}


def consumer_config(bootstrap: str, security: dict | None = None) -> dict:
    return {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "auto.offset.reset": "earliest", **(security or {})}


# --- phases ------------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, partitions: int, compression: str, count: int,
            payloads: list[bytes], process: psutil.Process, errors: list[str], security: dict | None = None) -> Phase:
    producer = Producer(producer_config(bootstrap, compression, security=security))
    failed = []

    def delivered(err, _msg) -> None:
        if err is not None:
            failed.append(err)

    producer.list_topics(topic, timeout=30)    # connect and learn the leaders before timing
    deadline = time.monotonic() + PHASE_DEADLINE_S
    cpu0, start = cpu_seconds(process), time.perf_counter()
    sent = 0
    for i in range(count):
        while True:
            try:
                producer.produce(topic, payloads[i % POOL], partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.005)
        sent += 1
        if not i & 1023:
            producer.poll(0)
            if time.monotonic() > deadline:
                errors.append(f"produce {topic}: phase deadline after {sent} messages")
                break
    left = producer.flush(max(deadline - time.monotonic(), 1.0))
    seconds, cpu = time.perf_counter() - start, cpu_seconds(process) - cpu0
    if left:
        errors.append(f"produce {topic}: {left} messages still unacknowledged at the deadline")
    if failed:
        errors.append(f"produce {topic}: {len(failed)} delivery errors, first {failed[0]}")
    return Phase(sent - left - len(failed), seconds, cpu)


def consume(bootstrap: str, topic: str, partitions: int, count: int, process: psutil.Process,
            errors: list[str], security: dict | None = None) -> Phase:
    consumer = Consumer(consumer_config(bootstrap, security))
    deadline = time.monotonic() + PHASE_DEADLINE_S
    cpu0, start = cpu_seconds(process), time.perf_counter()
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    received = 0
    byte_count = 0
    try:
        while received < count and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=1.0):
                if message.error() is not None:
                    if message.error().code() != KafkaError._PARTITION_EOF:
                        errors.append(f"consume {topic}: {message.error()}")
                    continue
                received += 1
                byte_count += len(message.value())
        seconds, cpu = time.perf_counter() - start, cpu_seconds(process) - cpu0
    finally:
        consumer.close()
    if received < count:
        errors.append(f"consume {topic}: {received} of {count} messages before the deadline")
    if byte_count != received * MESSAGE_BYTES:
        errors.append(f"consume {topic}: {byte_count} bytes for {received} messages")
    return Phase(received, seconds, cpu)


def measure_latency(bootstrap: str, topic: str, partitions: int, rate: int, seconds: float, linger_ms: int,
                    process: psutil.Process, errors: list[str], security: dict | None = None) -> Latency:
    """Messages at `rate`/s for `seconds`, each carrying its send time; p50/p99 of arrival - send,
    and the broker's CPU per message meanwhile (at a low rate: the cost of a small request)."""
    consumer = Consumer(consumer_config(bootstrap, security))
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    producer = Producer(producer_config(bootstrap, "none", linger_ms=linger_ms, security=security))
    filler = b"x" * (MESSAGE_BYTES - 9)
    delays_ns: list[int] = []
    warm = threading.Event()
    stop = threading.Event()

    def receive() -> None:
        while not stop.is_set():
            # poll, not consume(n, timeout): consume waits for n messages or the whole timeout
            message = consumer.poll(0.05)
            now = time.perf_counter_ns()
            if message is None or message.error() is not None or not message.value():
                continue
            value = message.value()
            if value[:1] == b"W":
                warm.set()
            else:
                delays_ns.append(now - _STAMP.unpack_from(value, 1)[0])

    receiver = threading.Thread(target=receive, name="latency-consumer", daemon=True)
    receiver.start()
    # Warm up until the consumer sees what is produced, so start-up costs stay out of the figures.
    warm_deadline = time.monotonic() + 30
    while not warm.is_set() and time.monotonic() < warm_deadline:
        for p in range(partitions):
            producer.produce(topic, b"W" + filler, partition=p)
        producer.flush(5)
        warm.wait(0.5)
    if not warm.is_set():
        errors.append(f"latency {topic}: the consumer saw nothing within 30 s")
    total = int(rate * seconds)
    cpu0 = cpu_seconds(process)
    send_stamped(producer, topic, partitions, total, rate)
    producer.flush(30)
    end = time.monotonic() + 30
    while len(delays_ns) < total and time.monotonic() < end:
        time.sleep(0.005)
    cpu = cpu_seconds(process) - cpu0
    stop.set()
    receiver.join(10)
    consumer.close()
    if len(delays_ns) < total:
        errors.append(f"latency {topic}: {len(delays_ns)} of {total} messages arrived")
    return Latency.of(total, delays_ns, cpu)


def send_stamped(producer: Producer, topic: str, partitions: int, total: int, rate: int) -> None:
    """`total` messages at `rate`/s over the partitions in turn, each "T" + its send time (ns) +
    filler, MESSAGE_BYTES in all."""
    filler = b"x" * (MESSAGE_BYTES - 9)
    start = time.perf_counter()
    for i in range(total):
        pause = start + i / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        producer.produce(topic, b"T" + _STAMP.pack(time.perf_counter_ns()) + filler, partition=i % partitions)
        producer.poll(0)


# --- brokers -----------------------------------------------------------------------------------


def create_topics_admin(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, future in admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()]).items():
        try:
            future.result(30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def create_topics_offline(data_dir: Path, topics: dict[str, int]) -> None:
    """Create the gateway's topics in its data directory before it starts, through its own core
    (so the benchmark does not depend on which admin APIs the Kafka front end serves)."""
    from core.names import TopicName
    from core.service import Core
    from storage.config import StorageConfig
    from storage.embedded import EmbeddedStorage

    async def create() -> None:
        storage = await EmbeddedStorage.open(data_dir, StorageConfig())
        core = Core(storage.metadata, storage.logs)
        await core.start()
        for name, partitions in topics.items():
            await core.create_topic(TopicName.of(name), partitions)
        await core.close()
        await storage.close()
    asyncio.run(create())


def wanted_topics(cases: list[tuple[int, str]], latency_partitions: list[int]) -> dict[str, int]:
    topics = {topic_for(p, c): p for p, c in cases}
    topics.update({latency_topic(p): p for p in latency_partitions})
    return topics


class Profiler:
    """py-spy on a pid, folded stacks (`--format raw`) written when stopped."""

    def __init__(self, pid: int, path: Path, rate: int = 250) -> None:
        spy = Path(sys.executable).parent / "py-spy"
        self._proc = subprocess.Popen([str(spy), "record", "--pid", str(pid), "--format", "raw", "--rate",
                                       str(rate), "--nonblocking", "--gil", "-o", str(path)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        self._proc.send_signal(2)   # SIGINT: py-spy writes its output and exits
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()


TLS_SUFFIX = "-tls"   # gateway-tls's topics: its own, in the same process as the plaintext runs


def self_signed_certificate(work_dir: Path, name: str = "bench-tls") -> tuple[str, str]:
    """A throwaway certificate for 127.0.0.1 (its own CA), and its key."""
    cert, key = work_dir / f"{name}.pem", work_dir / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return str(cert), str(key)


def start_broker(name: str, work_dir: Path, topics: dict[str, int],
                 tls: tuple[str, str] | None = None) -> RunningBroker:
    if name == "gateway":
        data_dir = work_dir / "gateway-data"
        create_topics_offline(data_dir, topics)
        tls_args = ("--kafka-tls-port", "0", "--tls-cert", tls[0], "--tls-key", tls[1]) if tls else ()
        return start_gateway(data_dir, work_dir, tls_args)
    if name == "tansu":
        broker = start_tansu(work_dir)
        create_topics_admin(broker.bootstrap, topics)
        return broker
    raise SystemExit(f"unknown broker {name!r}: gateway or tansu")


def _better(old: Phase | None, new: Phase) -> Phase:
    """Best of the rounds: contention from other work on the machine only ever slows a phase down."""
    if old is None or new.msgs_per_s > old.msgs_per_s:
        return new
    return old


def run_all(names: list[str], work_dir: Path, args: argparse.Namespace, payloads: list[bytes]) -> dict[str, BrokerResult]:
    """Every broker runs at once and the phases alternate between them, so a burst of load from
    elsewhere on the machine hits both alike; each case runs `args.rounds` times, the best counts."""
    cases = [(p, c) for p, c in CASES if p in args.partitions and c in args.compression]
    topics = {f"{topic_for(p, c)}-r{r}": p for p, c in cases for r in range(args.rounds)}
    if args.latency_seconds > 0:
        topics.update({latency_topic(p): p for p in args.partitions})
    tls = self_signed_certificate(work_dir) if args.tls and "gateway" in names else None
    if tls is not None:
        topics.update({f"{topic}{TLS_SUFFIX}": p for topic, p in topics.items()})
        names = [*names, "gateway-tls"]
    security = {"gateway-tls": {"security.protocol": "SSL", "ssl.ca.location": tls[0]}} if tls else {}
    suffix = {"gateway-tls": TLS_SUFFIX}
    results = {name: BrokerResult(name) for name in names}
    brokers: dict[str, RunningBroker] = {}
    profiler = None
    try:
        for name in names:
            if name == "gateway-tls":   # the gateway's own process, through its TLS port
                gateway = brokers["gateway"]
                brokers[name] = replace(gateway, name=name, bootstrap=gateway.kafka_tls)
            else:
                brokers[name] = start_broker(name, work_dir, topics, tls)
        processes = {name: psutil.Process(broker.pid) for name, broker in brokers.items()}
        if args.profile_dir is not None and "gateway" in brokers:
            args.profile_dir.mkdir(parents=True, exist_ok=True)
            profiler = Profiler(brokers["gateway"].pid, args.profile_dir / f"gateway-{int(time.time())}.txt")
        for round_ in range(args.rounds):
            for partitions, compression in cases:
                key, case_topic = case_key(partitions, compression), f"{topic_for(partitions, compression)}-r{round_}"
                for name, broker in brokers.items():
                    result, topic = results[name], case_topic + suffix.get(name, "")
                    print(f"  round {round_ + 1} {key} {name}", file=sys.stderr, flush=True)
                    produced = produce(broker.bootstrap, topic, partitions, compression, args.messages, payloads,
                                       processes[name], result.errors, security.get(name))
                    consumed = consume(broker.bootstrap, topic, partitions, produced.messages, processes[name],
                                       result.errors, security.get(name))
                    result.produce[key] = _better(result.produce.get(key), produced)
                    result.consume[key] = _better(result.consume.get(key), consumed)
        if args.latency_seconds > 0:
            for partitions in args.partitions:
                for name, broker in brokers.items():
                    print(f"  latency {partitions}p {name}", file=sys.stderr, flush=True)
                    results[name].latency[partitions] = measure_latency(
                        broker.bootstrap, latency_topic(partitions) + suffix.get(name, ""), partitions,
                        args.latency_rate, args.latency_seconds, args.latency_linger_ms, processes[name],
                        results[name].errors, security.get(name))
    finally:
        if profiler is not None:
            profiler.stop()
        for broker in brokers.values():
            broker.stop()
    return results


# --- report ------------------------------------------------------------------------------------


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def report(results: dict[str, BrokerResult], args: argparse.Namespace) -> str:
    lines = [f"{args.messages:,} messages of {MESSAGE_BYTES} B per case, acks=all, idempotent producer; "
             f"best of {args.rounds} rounds.", "",
             "| case | broker | produce msg/s | produce MB/s | consume msg/s | consume MB/s "
             "| broker CPU s/M msgs (produce) | (consume) |",
             "|---|---|---|---|---|---|---|---|"]
    gateway, tansu, tls = results.get("gateway"), results.get("tansu"), results.get("gateway-tls")
    keys = [case_key(p, c) for p, c in CASES if p in args.partitions and c in args.compression]
    for key in keys:
        for result in results.values():
            prod, cons = result.produce.get(key), result.consume.get(key)
            if prod is None or cons is None:
                continue
            lines.append(f"| {key} | {result.broker} | {prod.msgs_per_s:,.0f} | {prod.mb_per_s:.1f} | "
                         f"{cons.msgs_per_s:,.0f} | {cons.mb_per_s:.1f} | {prod.cpu_s_per_million:.1f} | "
                         f"{cons.cpu_s_per_million:.1f} |")
        if gateway and tls and key in gateway.produce and key in tls.produce:
            gp, sp, gc, sc = gateway.produce[key], tls.produce[key], gateway.consume[key], tls.consume[key]
            lines.append(f"| {key} | **gateway-tls / gateway** | **{_ratio(sp.msgs_per_s, gp.msgs_per_s)}** | | "
                         f"**{_ratio(sc.msgs_per_s, gc.msgs_per_s)}** | | "
                         f"**{_ratio(sp.cpu_s_per_million, gp.cpu_s_per_million)}** | "
                         f"**{_ratio(sc.cpu_s_per_million, gc.cpu_s_per_million)}** |")
        if gateway and tansu and key in gateway.produce and key in tansu.produce:
            gp, tp, gc, tc = gateway.produce[key], tansu.produce[key], gateway.consume[key], tansu.consume[key]
            lines.append(f"| {key} | **gateway / tansu** | **{_ratio(gp.msgs_per_s, tp.msgs_per_s)}** | | "
                         f"**{_ratio(gc.msgs_per_s, tc.msgs_per_s)}** | | "
                         f"**{_ratio(gp.cpu_s_per_million, tp.cpu_s_per_million)}** | "
                         f"**{_ratio(gc.cpu_s_per_million, tc.cpu_s_per_million)}** |")
    if any(r.latency for r in results.values()):
        lines += ["", f"End-to-end latency and broker CPU per message, {args.latency_rate:,} msg/s for "
                  f"{args.latency_seconds:g} s (producer linger.ms={args.latency_linger_ms}, no compression):", "",
                  "| partitions | broker | p50 ms | p99 ms | max ms | received | broker CPU µs/msg |",
                  "|---|---|---|---|---|---|---|"]
        for partitions in args.partitions:
            for result in results.values():
                lat = result.latency.get(partitions)
                if lat is not None:
                    lines.append(f"| {partitions} | {result.broker} | {lat.p50_ms:.2f} | {lat.p99_ms:.2f} | "
                                 f"{lat.max_ms:.1f} | {lat.received:,}/{lat.sent:,} | {lat.cpu_us_per_message:.0f} |")
            if gateway and tls and partitions in gateway.latency and partitions in tls.latency:
                g, s = gateway.latency[partitions], tls.latency[partitions]
                lines.append(f"| {partitions} | **gateway-tls / gateway** | **{_ratio(s.p50_ms, g.p50_ms)}** | "
                             f"**{_ratio(s.p99_ms, g.p99_ms)}** | | | "
                             f"**{_ratio(s.cpu_us_per_message, g.cpu_us_per_message)}** |")
            if gateway and tansu and partitions in gateway.latency and partitions in tansu.latency:
                g, t = gateway.latency[partitions], tansu.latency[partitions]
                lines.append(f"| {partitions} | **gateway / tansu** | **{_ratio(g.p50_ms, t.p50_ms)}** | "
                             f"**{_ratio(g.p99_ms, t.p99_ms)}** | | | "
                             f"**{_ratio(g.cpu_us_per_message, t.cpu_us_per_message)}** |")
    lines += ["", "tansu: memory storage, no fsync. gateway: every acknowledged batch fsynced to its journal."]
    for result in results.values():
        for error in result.errors:
            lines.append(f"- {result.broker}: {error}")
    return "\n".join(lines)


def to_json(results: dict[str, BrokerResult]) -> dict:
    out = {}
    for name, result in results.items():
        entry = asdict(result)
        for kind in ("produce", "consume"):
            for key, phase in getattr(result, kind).items():
                entry[kind][key].update(msgs_per_s=phase.msgs_per_s, mb_per_s=phase.mb_per_s,
                                        cpu_s_per_million=phase.cpu_s_per_million)
        out[name] = entry
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000, help="messages per case")
    parser.add_argument("--brokers", default="gateway,tansu", help="comma-separated: gateway, tansu")
    parser.add_argument("--partitions", default="1,8", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--compression", default="none,lz4", type=lambda s: s.split(","))
    parser.add_argument("--rounds", type=int, default=2, help="runs of each case; the best counts")
    parser.add_argument("--latency-rate", type=int, default=2000, help="messages/s of the latency run")
    parser.add_argument("--latency-seconds", type=float, default=10.0, help="0 skips the latency run")
    parser.add_argument("--latency-linger-ms", type=int, default=1, help="the latency run's producer linger.ms")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--profile-dir", type=Path, help="py-spy the gateway; folded stacks go here")
    parser.add_argument("--tls", action="store_true",
                        help="also run every phase through the gateway's TLS port (gateway-tls)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    payloads = make_payloads()
    work_dir = Path(tempfile.mkdtemp(dir=Path.cwd(), prefix="bench-kafka-"))
    try:
        results = run_all(args.brokers.split(","), work_dir, args, payloads)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(report(results, args))
    if args.json is not None:
        args.json.write_text(json.dumps(to_json(results), indent=1))


if __name__ == "__main__":
    main()

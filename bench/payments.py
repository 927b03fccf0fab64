"""The payment shape: many services, each sending one small message and waiting for its acknowledgement
before the next, at a fixed rate each, against the gateway and the reference brokers in the same run.

Brokers (each started here, all at once; the rounds alternate between them, so a burst of other work
on a shared machine lands on all alike):
  - gateway: one `gateway serve`, embedded storage (in-process bookie, E = Qw = Qa = 1), Kafka and AMQP;
  - replicated: `gateway cluster up` as a library: ZooKeeper, 3 `gateway bookie`, one `gateway serve`,
    E3/Qw3/Qa2, Kafka and AMQP;
  - tansu (Kafka, memory storage, no fsync) and RabbitMQ (Debian's, AMQP, a quorum queue).
Clients (bench/payment_clients.py): N producers × --rate msg/s, --size bytes; Kafka with confluent-kafka
(acks=all, idempotent, linger.ms 0) over --partitions partitions; AMQP with pika in confirm mode,
persistent messages to a durable queue (quorum by default); one consumer per phase keeps up.

Reported per broker and round: acknowledged msg/s; server CPU per message (user + system, from /proc
through psutil) and write system calls per message (/proc/PID/io counts write, writev and pwritev,
not send or sendmsg: compare it between gateway setups only), summed over every process of the
broker side (the gateway, its bookies and ZooKeeper, tansu, RabbitMQ's Erlang VM and its helpers;
the clients' own CPU is not in it); ack and end-to-end
latency p50/p99; how busy the machine was (all cores), and how much of that was the clients and how
much other work. Ratios to the reference are taken round by round.

    python -m bench.payments [--producers 50] [--rate 20] [--size 512] [--seconds 20] [--rounds 3]
                             [--protocols kafka,amqp] [--brokers gateway,replicated,tansu,rabbitmq]
    python -m bench.payments --profile-dir DIR   # also py-spy the gateway processes (folded stacks)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from bench.kafka import Profiler, create_topics_admin
from bench.payment_clients import (AmqpFollower, AmqpPaymentPublisher, KafkaFollower, KafkaPaymentProducer,
                                   Pacer, Tally, declare_queue)
from bench.rabbitmq import pick_port, start_rabbitmq
from bench.reference import start_gateway, start_tansu
from gateway.cluster.launcher import ClusterSpec, LocalCluster

BROKERS = ("gateway", "replicated", "tansu", "rabbitmq")
SPEAKS = {"gateway": ("kafka", "amqp"), "replicated": ("kafka", "amqp"), "tansu": ("kafka",),
          "rabbitmq": ("amqp",)}
REFERENCE = {"kafka": "tansu", "amqp": "rabbitmq"}
GATEWAY_SETUPS = ("gateway", "replicated")
BASELINE_SUFFIX = "-before"      # --baseline-src: the same setups from another checkout
CATCH_UP_S = 30.0
CONNECTING_AT_ONCE = 16


class ServerSide:
    """The processes of a broker side (the given ones and all their descendants): their CPU seconds
    (user + system) and their write system calls (/proc/PID/io syscw: socket writes, journal writes)."""

    def __init__(self, pids: list[int]) -> None:
        self._processes = []
        for pid in pids:
            root = psutil.Process(pid)
            self._processes += [root, *root.children(recursive=True)]

    def totals(self) -> tuple[float, int]:
        cpu, writes = 0.0, 0
        for process in self._processes:
            try:
                times = process.cpu_times()
                writes += process.io_counters().write_count
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            cpu += times.user + times.system
        return cpu, writes


@dataclass
class Broker:
    name: str
    kafka: str = ""           # "host:port", empty when it does not speak Kafka
    amqp: str = ""
    pids: list[int] = field(default_factory=list)
    gateway_pids: list[int] = field(default_factory=list)   # the Python processes, for the profiler
    describe: str = ""
    stop: object = None


@dataclass
class PhaseResult:
    protocol: str
    broker: str
    round: int
    acked: int
    seconds: float
    server_cpu_s: float
    server_writes: int        # write system calls of the broker side
    client_cpu_s: float
    machine_busy_s: float     # every core's busy time during the phase
    ack_p50_ms: float
    ack_p99_ms: float
    e2e_p50_ms: float
    e2e_p99_ms: float
    received: int
    errors: list[str]

    @property
    def msgs_per_s(self) -> float:
        return self.acked / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_message(self) -> float:
        return self.server_cpu_s / self.acked * 1e6 if self.acked else float("nan")

    @property
    def writes_per_message(self) -> float:
        return self.server_writes / self.acked if self.acked else float("nan")


def percentiles(delays_ns: list[int]) -> tuple[float, float]:
    if len(delays_ns) < 2:
        return float("nan"), float("nan")
    quantiles = statistics.quantiles([d / 1e6 for d in delays_ns], n=100, method="inclusive")
    return quantiles[49], quantiles[98]


def machine_busy_s() -> float:
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


# --- brokers -------------------------------------------------------------------------------------


def start_brokers(names: list[str], protocols: list[str], work_dir: Path, args: argparse.Namespace) -> dict[str, Broker]:
    brokers: dict[str, Broker] = {}
    wanted = [(name, None) for name in names]
    if args.baseline_src is not None:   # the same gateway setups once more, from another checkout
        wanted += [(name, args.baseline_src) for name in names if name in GATEWAY_SETUPS]
    try:
        for name, source in wanted:
            if not set(SPEAKS[name]) & set(protocols):
                continue
            label = name if source is None else f"{name}{BASELINE_SUFFIX}"
            print(f"  starting {label}", file=sys.stderr, flush=True)
            with _code_from(source):
                brokers[label] = start_broker(name, work_dir / label, args)
            brokers[label].name = label
    except BaseException:
        stop_brokers(brokers)
        raise
    return brokers


@contextlib.contextmanager
def _code_from(source: Path | None):
    """Processes started inside import the gateway from `source` first (PYTHONPATH is inherited)."""
    if source is None:
        yield
        return
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(source.resolve())
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


def start_broker(name: str, work_dir: Path, args: argparse.Namespace) -> Broker:
    work_dir.mkdir(parents=True, exist_ok=True)
    if name == "gateway":
        running = start_gateway(work_dir / "gateway-data", work_dir)
        return Broker(name, running.bootstrap, running.amqp, [running.pid], [running.pid],
                      "gateway: `gateway serve`, embedded storage (E=Qw=Qa=1, fsync per acknowledged write)",
                      running.stop)
    if name == "replicated":
        cluster = LocalCluster(ClusterSpec(data_dir=work_dir / "cluster", bookies=3, brokers=1, ensemble=3,
                                           write_quorum=3, ack_quorum=2, log_level="warning"))
        ready = cluster.start()
        broker = ready["brokers"][0]
        bookies = [b["pid"] for b in ready["bookies"]]
        # An ensemble lists its members in the READY line; a single server only has its pid.
        zookeepers = [member["pid"] for member in ready.get("zookeepers", []) if member.get("pid")] or \
            [pid for pid in [getattr(cluster.zookeeper, "pid", None)] if pid]
        pids = [broker["pid"], *bookies, *zookeepers]
        return Broker(name, broker["kafka"], broker["amqp"], pids, [broker["pid"], *bookies],
                      "replicated: `gateway cluster up`, 3 bookies, E3/Qw3/Qa2, ZooKeeper (CPU: all five processes)",
                      cluster.stop)
    if name == "tansu":
        running = start_tansu(work_dir)
        return Broker(name, kafka=running.bootstrap, pids=[running.pid],
                      describe="tansu: Kafka in Rust, memory storage (no fsync)", stop=running.stop)
    if name == "rabbitmq":
        rabbit = start_rabbitmq(work_dir, pick_port(args.rabbit_port))
        return Broker(name, amqp=rabbit.address, pids=[rabbit.pid],
                      describe=f"rabbitmq: {rabbit.version()} (Debian package)", stop=rabbit.stop)
    raise SystemExit(f"unknown broker {name!r}: one of {', '.join(BROKERS)}")


def stop_brokers(brokers: dict[str, Broker]) -> None:
    for broker in brokers.values():
        try:
            broker.stop()
        except Exception as exc:   # one broker that fails to stop must not keep the others running
            print(f"  stopping {broker.name}: {exc!r}", file=sys.stderr)


# --- one phase -----------------------------------------------------------------------------------


def run_phase(protocol: str, broker: Broker, round_: int, args: argparse.Namespace) -> PhaseResult:
    """N producers at --rate each for --seconds, a consumer keeping up, the broker side metered."""
    name = f"payments-{protocol}-r{round_}"
    errors: list[str] = []
    if protocol == "kafka":
        create_topics_admin(broker.kafka, {name: args.partitions})
        follower = KafkaFollower(broker.kafka, name, args.partitions)
        producers = _connect_all(lambda i: KafkaPaymentProducer(broker.kafka, name, i % args.partitions, args.size),
                                 args.producers)
    else:
        declare_queue(broker.amqp, name, args.queue_type)
        follower = AmqpFollower(broker.amqp, name)
        producers = _connect_all(lambda _: AmqpPaymentPublisher(broker.amqp, name, args.size), args.producers)
    count = max(int(args.rate * args.seconds), 1)
    tally = Tally()
    server, client = ServerSide(broker.pids), psutil.Process()
    start = time.perf_counter() + 0.2
    threads = [threading.Thread(target=p.run, args=(Pacer(start, i, args.producers, args.rate), count, tally),
                                name=f"producer-{i}", daemon=True) for i, p in enumerate(producers)]
    (server0, writes0), client0, busy0 = server.totals(), client.cpu_times(), machine_busy_s()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(args.seconds + 120)
    seconds = time.perf_counter() - start
    (server1, writes1), busy_s = server.totals(), machine_busy_s() - busy0
    server_s = server1 - server0
    client1 = client.cpu_times()
    client_s = client1.user + client1.system - client0.user - client0.system
    follower.wait_for(len(tally.ack_ns), CATCH_UP_S)
    follower.close()
    for producer in producers:
        if hasattr(producer, "close"):
            producer.close()
    if tally.failed:
        errors.append(f"{len(tally.failed)} sends failed, first: {tally.failed[0]}")
    if len(follower.delays_ns) < len(tally.ack_ns):
        errors.append(f"the consumer saw {len(follower.delays_ns)} of {len(tally.ack_ns)} acknowledged messages")
    ack, e2e = percentiles(tally.ack_ns), percentiles(follower.delays_ns)
    return PhaseResult(protocol, broker.name, round_, len(tally.ack_ns), seconds, server_s, writes1 - writes0,
                       client_s, busy_s,
                       ack[0], ack[1], e2e[0], e2e[1], len(follower.delays_ns), errors)


def _connect_all(make, count: int) -> list:
    """`count` producers connected and warmed up a few at a time (one by one takes minutes for hundreds)."""
    with ThreadPoolExecutor(CONNECTING_AT_ONCE) as pool:
        return list(pool.map(make, range(count)))


def run_all(brokers: dict[str, Broker], protocols: list[str], args: argparse.Namespace) -> list[PhaseResult]:
    results = []
    profilers = []
    if args.profile_dir is not None:
        args.profile_dir.mkdir(parents=True, exist_ok=True)
        profilers = [Profiler(pid, args.profile_dir / f"{broker.name}-{pid}.txt")
                     for broker in brokers.values() for pid in broker.gateway_pids]
    try:
        for round_ in range(args.rounds):
            # Every other round runs the brokers in the opposite order: what runs first after a
            # switch of protocol (or right after another broker) is not always the same one.
            order = list(brokers.values()) if round_ % 2 == 0 else list(reversed(brokers.values()))
            for protocol in protocols:
                for broker in order:
                    if protocol not in SPEAKS[broker.name.removesuffix(BASELINE_SUFFIX)]:
                        continue
                    print(f"  round {round_ + 1} {protocol} {broker.name}", file=sys.stderr, flush=True)
                    results.append(run_phase(protocol, broker, round_, args))
    finally:
        for profiler in profilers:
            profiler.stop()
    return results


# --- report --------------------------------------------------------------------------------------


def _span(values: list[float], fmt: str) -> str:
    values = [v for v in values if v == v]
    if not values:
        return "-"
    low, high = min(values), max(values)
    return format(low, fmt) if format(low, fmt) == format(high, fmt) else f"{low:{fmt}}–{high:{fmt}}"


def report(results: list[PhaseResult], brokers: dict[str, Broker], protocols: list[str],
           args: argparse.Namespace) -> str:
    cores = psutil.cpu_count() or 1
    lines = [f"{args.producers} producers × {args.rate:g} msg/s, {args.size} B, one message then wait for its ack, "
             f"{args.seconds:g} s per phase, {args.rounds} alternating rounds (ranges over the rounds); "
             f"Kafka over {args.partitions} partitions, AMQP to a durable {args.queue_type} queue.", "",
             *[f"- {b.describe}" for b in brokers.values()], "",
             "| protocol | broker | msg/s | server CPU µs/msg | server writes/msg | ack p50 ms | ack p99 ms | e2e p50 ms | e2e p99 ms "
             f"| machine busy ({cores} cores) | of it clients | of it other work |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for protocol in protocols:
        for name in brokers:
            mine = [r for r in results if r.protocol == protocol and r.broker == name]
            if not mine:
                continue
            busy = [r.machine_busy_s / r.seconds / cores * 100 for r in mine]
            clients = [r.client_cpu_s / r.seconds / cores * 100 for r in mine]
            other = [(r.machine_busy_s - r.client_cpu_s - r.server_cpu_s) / r.seconds / cores * 100 for r in mine]
            lines.append(f"| {protocol} | {name} | {_span([r.msgs_per_s for r in mine], ',.0f')} | "
                         f"{_span([r.cpu_us_per_message for r in mine], ',.0f')} | "
                         f"{_span([r.writes_per_message for r in mine], '.1f')} | "
                         f"{_span([r.ack_p50_ms for r in mine], '.2f')} | {_span([r.ack_p99_ms for r in mine], '.1f')} | "
                         f"{_span([r.e2e_p50_ms for r in mine], '.2f')} | {_span([r.e2e_p99_ms for r in mine], '.1f')} | "
                         f"{_span(busy, '.0f')} % | {_span(clients, '.0f')} % | {_span(other, '.0f')} % |")
    lines += ["", "Ratios, round by round (each round's phases ran back to back):", "",
              "| protocol | broker ÷ other | CPU/msg | writes/msg | msg/s | ack p99 |", "|---|---|---|---|---|---|"]
    pairs = [(p, b, REFERENCE[p]) for p in protocols for b in ("gateway", "replicated")]
    pairs += [(p, "replicated", "gateway") for p in protocols]
    pairs += [(p, setup, setup + BASELINE_SUFFIX) for p in protocols for setup in GATEWAY_SETUPS]
    for protocol, mine, other in pairs:
        ratios = []
        for round_ in range(args.rounds):
            a = [r for r in results if (r.protocol, r.broker, r.round) == (protocol, mine, round_)]
            b = [r for r in results if (r.protocol, r.broker, r.round) == (protocol, other, round_)]
            if a and b:
                ratios.append((a[0].cpu_us_per_message / b[0].cpu_us_per_message,
                               a[0].msgs_per_s / b[0].msgs_per_s, a[0].ack_p99_ms / b[0].ack_p99_ms,
                               a[0].writes_per_message / b[0].writes_per_message))
        if ratios:
            lines.append(f"| {protocol} | {mine} ÷ {other} | **{_span([r[0] for r in ratios], '.2f')}** | "
                         f"{_span([r[3] for r in ratios], '.2f')} | {_span([r[1] for r in ratios], '.2f')} | {_span([r[2] for r in ratios], '.2f')} |")
    load = os.getloadavg()
    lines += ["", f"Load average at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}."]
    for result in results:
        for error in result.errors:
            lines.append(f"- {result.protocol} {result.broker} round {result.round + 1}: {error}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--producers", type=int, default=50, help="producers (services), one connection each")
    parser.add_argument("--rate", type=float, default=20.0, help="messages per second of each producer")
    parser.add_argument("--size", type=int, default=512, help="message bytes (at least 9)")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds over the brokers")
    parser.add_argument("--partitions", type=int, default=8, help="Kafka partitions of the topic")
    parser.add_argument("--queue-type", default="quorum", choices=("quorum", "classic"))
    parser.add_argument("--protocols", default="kafka,amqp", type=lambda s: s.split(","))
    parser.add_argument("--brokers", default=",".join(BROKERS), type=lambda s: s.split(","))
    parser.add_argument("--rabbit-port", type=int, default=5673, help="RabbitMQ's port (the next free one if taken)")
    parser.add_argument("--json", type=Path, help="also write every phase's figures here")
    parser.add_argument("--baseline-src", type=Path,
                        help="a checkout whose gateway runs beside this one (setups named ...-before), for before/after")
    parser.add_argument("--profile-dir", type=Path, help="py-spy the gateway processes; folded stacks go here")
    args = parser.parse_args(argv)
    if set(args.protocols) - set(REFERENCE):
        parser.error("--protocols: kafka and/or amqp")
    if set(args.brokers) - set(BROKERS):
        parser.error(f"--brokers: some of {', '.join(BROKERS)}")
    if args.size < 9 or args.producers < 1 or args.rate <= 0 or args.rounds < 1:
        parser.error("--size >= 9, --producers >= 1, --rate > 0, --rounds >= 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    work_dir = Path(tempfile.mkdtemp(dir=Path.cwd(), prefix="bench-payments-"))
    brokers: dict[str, Broker] = {}
    try:
        brokers = start_brokers(args.brokers, args.protocols, work_dir, args)
        results = run_all(brokers, args.protocols, args)
    finally:
        stop_brokers(brokers)
        shutil.rmtree(work_dir, ignore_errors=True)
    print(report(results, brokers, args.protocols, args))
    if args.json is not None:
        args.json.write_text(json.dumps([{**asdict(r), "msgs_per_s": r.msgs_per_s,
                                          "cpu_us_per_message": r.cpu_us_per_message} for r in results], indent=1))


if __name__ == "__main__":
    main()

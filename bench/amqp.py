"""AMQP publish/consume through a real `gateway serve` process, beside RabbitMQ in the same run.

Workload (pika, asynchronous SelectConnection, as a throughput-minded pika application is written):
  - publish N persistent (delivery-mode 2) 1 KiB messages to a durable queue in confirm mode, up to
    --window unconfirmed at a time, until every one is confirmed;
  - consume them with manual acks (one basic.ack per message), prefetch 100;
  - the broker process's CPU seconds (psutil) in each phase, per million messages;
  - then end-to-end latency: messages at a fixed rate (1,000/s for 30 s per broker by default, in
    three 10 s rounds that alternate between the brokers), published with confirms, each carrying
    its send time; a consumer on another connection (and thread) notes when each arrives; p50/p99
    of the difference over every round.
Queues: a classic durable queue on both brokers and a quorum queue (x-queue-type quorum) on
RabbitMQ. The gateway is asked for a quorum queue too; while it refuses one (406), its classic
queue stands against both of RabbitMQ's and the report says so.

Both brokers run at once and the phases alternate between them; each case runs --rounds times and
the best round counts (other work on a shared machine only ever slows a phase down).

    python -m bench.amqp [--messages 50000] [--brokers gateway,rabbitmq] [--json out.json]
    python -m bench.amqp --profile-dir DIR   # also py-spy the gateway (raw folded stacks)
    python -m bench.amqp --tls               # every client over TLS (amqps) on both brokers

With --tls both brokers get a TLS listener with one throwaway self-signed certificate (TLS 1.3) and
every connection goes through it; compare the ratios with a run without --tls.
"""

from __future__ import annotations

import argparse
import json
import shutil
import ssl
import struct
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pika
import pika.exceptions
import psutil

from bench.kafka import Latency, Phase, Profiler, cpu_seconds, self_signed_certificate
from bench.rabbitmq import RunningRabbit, pick_port, start_rabbitmq
from bench.reference import RunningBroker, start_gateway

MESSAGE_BYTES = 1024
PREFETCH = 100
PHASE_DEADLINE_S = 300.0
_STAMP = struct.Struct(">q")
QUEUE_TYPES = ("classic", "quorum")


@dataclass
class BrokerResult:
    broker: str
    publish: dict[str, Phase] = field(default_factory=dict)     # queue type -> phase
    consume: dict[str, Phase] = field(default_factory=dict)
    latency: dict[str, Latency] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)       # queue type -> why the broker refused it
    errors: list[str] = field(default_factory=list)


@dataclass
class Broker:
    name: str
    host: str
    port: int
    pid: int
    stop: object
    tls: ssl.SSLContext | None = None   # amqps: the client's context

    def parameters(self) -> pika.ConnectionParameters:
        tls = {} if self.tls is None else {"ssl_options": pika.SSLOptions(self.tls, self.host)}
        return pika.ConnectionParameters(self.host, self.port, credentials=pika.PlainCredentials("guest", "guest"),
                                         connection_attempts=3, retry_delay=1, heartbeat=0, **tls)


def queue_arguments(queue_type: str) -> dict:
    return {"x-queue-type": queue_type}


# --- clients -------------------------------------------------------------------------------------


class _Loop:
    """One SelectConnection and its I/O loop, run to completion or to a deadline."""

    def __init__(self, parameters: pika.ConnectionParameters, deadline_s: float) -> None:
        self.error: str | None = None
        self._deadline_s = deadline_s
        self.connection = pika.SelectConnection(parameters, on_open_callback=self._opened,
                                                on_open_error_callback=self._failed, on_close_callback=self._closed)

    def run(self) -> None:
        timer = self.connection.ioloop.call_later(self._deadline_s, self._timed_out)
        self.connection.ioloop.start()
        self.connection.ioloop.remove_timeout(timer)

    def finish(self) -> None:
        if self.connection.is_open:
            self.connection.close()

    def _opened(self, connection) -> None:
        connection.channel(on_open_callback=self.channel_open)

    def channel_open(self, channel) -> None:
        raise NotImplementedError

    def _failed(self, _connection, error) -> None:
        self.error = f"connection failed: {error!r}"
        self.connection.ioloop.stop()

    def _closed(self, _connection, reason) -> None:
        if not isinstance(reason, pika.exceptions.ConnectionClosedByClient) and self.error is None:
            self.error = f"connection closed: {reason!r}"
        self.connection.ioloop.stop()

    def _timed_out(self) -> None:
        self.error = f"deadline of {self._deadline_s:.0f}s passed"
        self.finish()
        self.connection.ioloop.stop()


class Publisher(_Loop):
    """Publishes `count` messages in confirm mode with at most `window` unconfirmed; with `rate`,
    paced at that many per second, each body starting with its send time."""

    def __init__(self, parameters, queue: str, count: int, window: int, payload: bytes,
                 rate: float | None = None, deadline_s: float = PHASE_DEADLINE_S) -> None:
        super().__init__(parameters, deadline_s)
        self.queue, self.count, self.window, self.payload, self.rate = queue, count, window, payload, rate
        self.sent = self.confirmed = self.nacked = 0
        self.started = self.ended = 0.0
        self._channel = None
        self._properties = pika.BasicProperties(delivery_mode=2)

    def channel_open(self, channel) -> None:
        self._channel = channel
        channel.confirm_delivery(self._on_confirm, callback=self._start)

    def _start(self, _frame) -> None:
        self.started = time.perf_counter()
        if self.rate is None:
            self._publish_more()
        else:
            self._tick()

    def _publish_more(self) -> None:
        channel, limit = self._channel, min(self.count, self.confirmed + self.nacked + self.window)
        while self.sent < limit:
            channel.basic_publish("", self.queue, self.payload, self._properties)
            self.sent += 1

    def _tick(self) -> None:
        due = min(self.count, int((time.perf_counter() - self.started) * self.rate) + 1)
        while self.sent < due:
            body = b"T" + _STAMP.pack(time.perf_counter_ns()) + self.payload[9:]
            self._channel.basic_publish("", self.queue, body, self._properties)
            self.sent += 1
        if self.sent < self.count:
            self.connection.ioloop.call_later(0.001, self._tick)

    def _on_confirm(self, frame) -> None:
        method = frame.method
        done = self.confirmed + self.nacked
        settled = method.delivery_tag - done if method.multiple else 1
        if isinstance(method, pika.spec.Basic.Ack):
            self.confirmed += settled
        else:
            self.nacked += settled
        if self.confirmed + self.nacked >= self.count:
            self.ended = time.perf_counter()
            self.finish()
        elif self.rate is None:
            self._publish_more()


class Receiver(_Loop):
    """Consumes `count` messages with prefetch 100 and one basic.ack each; with `stamped`, notes
    each message's delay since the send time its body starts with."""

    def __init__(self, parameters, queue: str, count: int, stamped: bool = False,
                 deadline_s: float = PHASE_DEADLINE_S) -> None:
        super().__init__(parameters, deadline_s)
        self.queue, self.count, self.stamped = queue, count, stamped
        self.received = self.byte_count = 0
        self.delays_ns: list[int] = []
        self.started = self.ended = 0.0
        self.ready = threading.Event()

    def channel_open(self, channel) -> None:
        channel.basic_qos(prefetch_count=PREFETCH, callback=lambda _frame: self._consume(channel))

    def _consume(self, channel) -> None:
        self.started = time.perf_counter()
        channel.basic_consume(self.queue, self._on_message, callback=lambda _frame: self.ready.set())

    def _on_message(self, channel, deliver, _properties, body) -> None:
        if self.stamped:
            self.delays_ns.append(time.perf_counter_ns() - _STAMP.unpack_from(body, 1)[0])
        channel.basic_ack(deliver.delivery_tag)
        self.received += 1
        self.byte_count += len(body)
        if self.received >= self.count:
            self.ended = time.perf_counter()
            self.finish()


# --- phases ---------------------------------------------------------------------------------------


def declare(broker: Broker, queue: str, queue_type: str) -> str | None:
    """Declare the durable queue; the broker's refusal text if it refuses it."""
    connection = pika.BlockingConnection(broker.parameters())
    try:
        connection.channel().queue_declare(queue, durable=True, arguments=queue_arguments(queue_type))
    except pika.exceptions.ChannelClosedByBroker as exc:
        return f"{exc.reply_code} {exc.reply_text}"
    finally:
        if connection.is_open:
            connection.close()
    return None


def publish(broker: Broker, queue: str, count: int, window: int, payload: bytes, errors: list[str]) -> Phase:
    process = psutil.Process(broker.pid)
    publisher = Publisher(broker.parameters(), queue, count, window, payload)
    cpu0 = cpu_seconds(process)
    publisher.run()
    cpu = cpu_seconds(process) - cpu0
    if publisher.error:
        errors.append(f"publish {queue}: {publisher.error}")
    if publisher.nacked:
        errors.append(f"publish {queue}: {publisher.nacked} messages nacked")
    seconds = (publisher.ended or time.perf_counter()) - publisher.started
    return Phase(publisher.confirmed, seconds, cpu)


def consume(broker: Broker, queue: str, count: int, errors: list[str]) -> Phase:
    process = psutil.Process(broker.pid)
    receiver = Receiver(broker.parameters(), queue, count)
    cpu0 = cpu_seconds(process)
    receiver.run()
    cpu = cpu_seconds(process) - cpu0
    if receiver.error:
        errors.append(f"consume {queue}: {receiver.error}")
    if receiver.received < count:
        errors.append(f"consume {queue}: {receiver.received} of {count} messages")
    if receiver.byte_count != receiver.received * MESSAGE_BYTES:
        errors.append(f"consume {queue}: {receiver.byte_count} bytes for {receiver.received} messages")
    seconds = (receiver.ended or time.perf_counter()) - receiver.started
    return Phase(receiver.received, seconds, cpu)


def measure_latency(broker: Broker, queue: str, rate: int, seconds: float, payload: bytes,
                    errors: list[str]) -> tuple[int, list[int]]:
    """Messages sent, and the delay of each that arrived (ns)."""
    total = int(rate * seconds)
    receiver = Receiver(broker.parameters(), queue, total, stamped=True, deadline_s=seconds + 60)
    thread = threading.Thread(target=receiver.run, name="latency-consumer", daemon=True)
    thread.start()
    if not receiver.ready.wait(30):
        errors.append(f"latency {queue}: the consumer did not start")
    publisher = Publisher(broker.parameters(), queue, total, total, payload, rate=rate, deadline_s=seconds + 60)
    publisher.run()
    thread.join(seconds + 90)
    for what, error in (("publisher", publisher.error), ("consumer", receiver.error)):
        if error:
            errors.append(f"latency {queue} {what}: {error}")
    if len(receiver.delays_ns) < total:
        errors.append(f"latency {queue}: {len(receiver.delays_ns)} of {total} messages arrived")
    return total, receiver.delays_ns


# --- brokers --------------------------------------------------------------------------------------


def start_broker(name: str, work_dir: Path, args: argparse.Namespace) -> tuple[Broker, str]:
    """The broker and a line describing it."""
    cert = self_signed_certificate(work_dir, f"{name}-tls") if args.tls else None
    client = ssl.create_default_context(cafile=cert[0]) if cert else None
    if name == "gateway":
        tls_args = ("--amqp-tls-port", "0", "--tls-cert", cert[0], "--tls-key", cert[1]) if cert else ()
        running: RunningBroker = start_gateway(work_dir / "gateway-data", work_dir, tls_args)
        address = running.amqp_tls if cert else running.amqp
        host, _, port = address.rpartition(":")
        return (Broker("gateway", host, int(port), running.pid, running.stop, client),
                "gateway: `gateway serve`, embedded storage" + (", amqps" if cert else ""))
    if name == "rabbitmq":
        port = pick_port(args.rabbit_port)
        tls_port = pick_port(port + 1) if cert else None
        tls = (f"listeners.ssl.default = 127.0.0.1:{tls_port}\nssl_options.certfile = {cert[0]}\n"
               f"ssl_options.keyfile = {cert[1]}\nssl_options.verify = verify_none\n") if cert else ""
        rabbit: RunningRabbit = start_rabbitmq(work_dir, port, extra_config=tls)
        return (Broker("rabbitmq", "127.0.0.1", tls_port or rabbit.port, rabbit.pid, rabbit.stop, client),
                f"rabbitmq: {rabbit.version()} (Debian package), port {tls_port or rabbit.port}"
                + (", amqps" if cert else ""))
    raise SystemExit(f"unknown broker {name!r}: gateway or rabbitmq")


def _better(old: Phase | None, new: Phase) -> Phase:
    if old is None or new.msgs_per_s > old.msgs_per_s:
        return new
    return old


def run_all(names: list[str], work_dir: Path, args: argparse.Namespace) -> tuple[dict[str, BrokerResult], list[str]]:
    payload = bytes(range(256)) * (MESSAGE_BYTES // 256)
    results = {name: BrokerResult(name) for name in names}
    brokers: dict[str, Broker] = {}
    described = []
    profiler = None
    try:
        for name in names:
            brokers[name], line = start_broker(name, work_dir, args)
            described.append(line)
        if args.profile_dir is not None and "gateway" in brokers:
            args.profile_dir.mkdir(parents=True, exist_ok=True)
            profiler = Profiler(brokers["gateway"].pid, args.profile_dir / f"gateway-amqp-{int(time.time())}.txt")
        for round_ in range(args.rounds):
            for queue_type in args.queue_types:
                for name, broker in brokers.items():
                    result = results[name]
                    if queue_type in result.refused:
                        continue
                    queue = f"bench-{queue_type}-r{round_}"
                    refusal = declare(broker, queue, queue_type)
                    if refusal is not None:
                        result.refused[queue_type] = refusal
                        continue
                    print(f"  round {round_ + 1} {queue_type} {name}", file=sys.stderr, flush=True)
                    published = publish(broker, queue, args.messages, args.window, payload, result.errors)
                    consumed = consume(broker, queue, published.messages, result.errors)
                    result.publish[queue_type] = _better(result.publish.get(queue_type), published)
                    result.consume[queue_type] = _better(result.consume.get(queue_type), consumed)
        if args.latency_seconds > 0:
            # Rounds alternate between the brokers and their delays are pooled: a burst of other work
            # on the machine lands in one short round of one broker, not in its whole figure.
            pooled: dict[tuple[str, str], tuple[int, list[int]]] = {}
            undeclared: set[tuple[str, str]] = set()
            for round_ in range(args.latency_rounds):
                for queue_type in args.queue_types:
                    for name, broker in brokers.items():
                        queue = f"bench-latency-{queue_type}"
                        if round_ == 0 and (queue_type in results[name].refused
                                            or declare(broker, queue, queue_type) is not None):
                            undeclared.add((name, queue_type))
                        if (name, queue_type) in undeclared:
                            continue
                        print(f"  latency round {round_ + 1} {queue_type} {name}", file=sys.stderr, flush=True)
                        sent, delays = measure_latency(broker, queue, args.latency_rate,
                                                       args.latency_seconds / args.latency_rounds, payload,
                                                       results[name].errors)
                        before_sent, before_delays = pooled.get((name, queue_type), (0, []))
                        pooled[(name, queue_type)] = (before_sent + sent, before_delays + delays)
            for (name, queue_type), (sent, delays) in pooled.items():
                results[name].latency[queue_type] = Latency.of(sent, delays)
    finally:
        if profiler is not None:
            profiler.stop()
        for broker in brokers.values():
            broker.stop()
    return results, described


# --- report ---------------------------------------------------------------------------------------


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def report(results: dict[str, BrokerResult], described: list[str], args: argparse.Namespace) -> str:
    lines = [f"{args.messages:,} persistent messages of {MESSAGE_BYTES} B per case to a durable queue; publisher "
             f"confirms, at most {args.window} unconfirmed; consumer prefetch {PREFETCH}, one ack per message; "
             f"best of {args.rounds} rounds.", "", *[f"- {line}" for line in described], "",
             "| queue | broker | publish msg/s | consume msg/s | broker CPU s/M msgs (publish) | (consume) |",
             "|---|---|---|---|---|---|"]
    for queue_type in args.queue_types:
        for result in results.values():
            pub, con = result.publish.get(queue_type), result.consume.get(queue_type)
            if pub is not None and con is not None:
                lines.append(f"| {queue_type} | {result.broker} | {pub.msgs_per_s:,.0f} | {con.msgs_per_s:,.0f} | "
                             f"{pub.cpu_s_per_million:.1f} | {con.cpu_s_per_million:.1f} |")
            elif queue_type in result.refused:
                lines.append(f"| {queue_type} | {result.broker} | refused: {result.refused[queue_type]} | | | |")
    gateway, rabbit = results.get("gateway"), results.get("rabbitmq")
    if gateway and rabbit and "classic" in gateway.publish:
        lines += ["", "| gateway ÷ RabbitMQ | publish msg/s | consume msg/s | CPU/msg publish | CPU/msg consume |",
                  "|---|---|---|---|---|"]
        for queue_type in args.queue_types:
            if queue_type not in rabbit.publish:
                continue
            mine = queue_type if queue_type in gateway.publish else "classic"
            g_pub, g_con = gateway.publish[mine], gateway.consume[mine]
            r_pub, r_con = rabbit.publish[queue_type], rabbit.consume[queue_type]
            lines.append(f"| gateway {mine} ÷ RabbitMQ {queue_type} | **{_ratio(g_pub.msgs_per_s, r_pub.msgs_per_s)}** | "
                         f"**{_ratio(g_con.msgs_per_s, r_con.msgs_per_s)}** | "
                         f"**{_ratio(g_pub.cpu_s_per_million, r_pub.cpu_s_per_million)}** | "
                         f"**{_ratio(g_con.cpu_s_per_million, r_con.cpu_s_per_million)}** |")
    if any(r.latency for r in results.values()):
        lines += ["", f"End-to-end latency, {args.latency_rate:,} msg/s for {args.latency_seconds:g} s per broker "
                  f"in {args.latency_rounds} alternating rounds (confirm mode, persistent, prefetch 100):", "",
                  "| queue | broker | p50 ms | p99 ms | max ms | received |", "|---|---|---|---|---|---|"]
        for queue_type in args.queue_types:
            for result in results.values():
                lat = result.latency.get(queue_type)
                if lat is not None:
                    lines.append(f"| {queue_type} | {result.broker} | {lat.p50_ms:.2f} | {lat.p99_ms:.2f} | "
                                 f"{lat.max_ms:.1f} | {lat.received:,}/{lat.sent:,} |")
        if gateway and rabbit and "classic" in gateway.latency:
            for queue_type in args.queue_types:
                if queue_type in rabbit.latency:
                    mine = queue_type if queue_type in gateway.latency else "classic"
                    g, r = gateway.latency[mine], rabbit.latency[queue_type]
                    lines.append(f"| gateway {mine} ÷ RabbitMQ {queue_type} | | **{_ratio(g.p50_ms, r.p50_ms)}** | "
                                 f"**{_ratio(g.p99_ms, r.p99_ms)}** | | |")
    for result in results.values():
        for error in result.errors:
            lines.append(f"- {result.broker}: {error}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000, help="messages per case")
    parser.add_argument("--brokers", default="gateway,rabbitmq", help="comma-separated: gateway, rabbitmq")
    parser.add_argument("--queue-types", default="classic,quorum", type=lambda s: s.split(","))
    parser.add_argument("--window", type=int, default=1000, help="unconfirmed publishes at most")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each case; the best counts")
    parser.add_argument("--latency-rate", type=int, default=1000, help="messages/s of the latency run")
    parser.add_argument("--latency-seconds", type=float, default=30.0, help="per broker; 0 skips the latency run")
    parser.add_argument("--latency-rounds", type=int, default=3, help="the latency run's alternating rounds")
    parser.add_argument("--rabbit-port", type=int, default=5673, help="RabbitMQ's port (the next free one if taken)")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--profile-dir", type=Path, help="py-spy the gateway; folded stacks go here")
    parser.add_argument("--tls", action="store_true", help="every client over TLS (amqps) on both brokers")
    args = parser.parse_args(argv)
    unknown = set(args.queue_types) - set(QUEUE_TYPES)
    if unknown:
        parser.error(f"unknown queue type(s): {', '.join(sorted(unknown))}")
    if args.latency_rounds < 1:
        parser.error("--latency-rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    work_dir = Path(tempfile.mkdtemp(dir=Path.cwd(), prefix="bench-amqp-"))
    try:
        results, described = run_all(args.brokers.split(","), work_dir, args)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(report(results, described, args))
    if args.json is not None:
        args.json.write_text(json.dumps({name: asdict(result) for name, result in results.items()}, indent=1))


if __name__ == "__main__":
    main()

"""FIFO message groups: dispatch throughput of a key-shared queue against a plain queue, with pika.

Workload, the same for both queues of one `gateway serve` process:
  - publish N persistent 1 KiB messages in confirm mode (window 1,000), each with an x-group-id
    header naming one of G groups in turn (a plain queue stores and ignores it);
  - consume them on C channels of one connection (pika's SelectConnection, one thread), prefetch
    100 each, one basic.ack per message; the consume rate is the dispatch throughput compared.
Cases: G = 1,000 groups (more groups than messages in flight: grouping should cost little) and
G = 16 (fewer groups than the prefetch windows: one message per group at a time caps what is in
flight). Each case runs --rounds times, alternating the queues; the best round counts.

    python -m bench.fifo_groups [--messages 20000] [--consumers 4] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path

import pika
import pika.exceptions
import psutil

from bench.amqp import MESSAGE_BYTES, PREFETCH, Broker, Publisher, _Loop, cpu_seconds
from bench.kafka import Phase
from bench.reference import start_gateway

WINDOW = 1000
GROUP_COUNTS = (1000, 16)


class GroupPublisher(Publisher):
    """Publisher's confirm-mode loop, each message with the x-group-id of the next of `groups`."""

    def __init__(self, parameters, queue: str, count: int, payload: bytes, groups: int) -> None:
        super().__init__(parameters, queue, count, WINDOW, payload)
        self._by_group = [pika.BasicProperties(delivery_mode=2, headers={"x-group-id": f"group-{g}"})
                          for g in range(groups)]

    def _publish_more(self) -> None:
        channel, limit, by_group = self._channel, min(self.count, self.confirmed + self.nacked + self.window), \
            self._by_group
        while self.sent < limit:
            channel.basic_publish("", self.queue, self.payload, by_group[self.sent % len(by_group)])
            self.sent += 1


class Consumers(_Loop):
    """`channels` consumers on one connection, prefetch 100 each, one basic.ack per message, until
    `count` messages arrived in all."""

    def __init__(self, parameters, queue: str, count: int, channels: int) -> None:
        super().__init__(parameters, 300.0)
        self.queue, self.count, self.channels = queue, count, channels
        self.received = 0
        self.started = self.ended = 0.0

    def _opened(self, connection) -> None:
        self.started = time.perf_counter()
        for _ in range(self.channels):
            connection.channel(on_open_callback=self.channel_open)

    def channel_open(self, channel) -> None:
        channel.basic_qos(prefetch_count=PREFETCH,
                          callback=lambda _frame: channel.basic_consume(self.queue, self._on_message))

    def _on_message(self, channel, deliver, _properties, _body) -> None:
        channel.basic_ack(deliver.delivery_tag)
        self.received += 1
        if self.received == self.count:
            self.ended = time.perf_counter()
            self.finish()


def run_case(broker: Broker, arguments: dict, messages: int, groups: int, consumers: int) -> tuple[Phase, Phase]:
    queue = f"fifo-bench-{uuid.uuid4().hex[:8]}"
    refused = declare_with(broker, queue, arguments)
    if refused:
        raise SystemExit(f"declaring {queue} failed: {refused}")
    process = psutil.Process(broker.pid)
    publisher = GroupPublisher(broker.parameters(), queue, messages, b"x" * MESSAGE_BYTES, groups)
    cpu0 = cpu_seconds(process)
    publisher.run()
    published = Phase(publisher.confirmed, publisher.ended - publisher.started, cpu_seconds(process) - cpu0)
    receiver = Consumers(broker.parameters(), queue, messages, consumers)
    cpu0 = cpu_seconds(process)
    receiver.run()
    if receiver.error or receiver.received < messages:
        raise SystemExit(f"consuming {queue}: {receiver.error or ''} {receiver.received} of {messages}")
    consumed = Phase(receiver.received, receiver.ended - receiver.started, cpu_seconds(process) - cpu0)
    return published, consumed


def declare_with(broker: Broker, queue: str, arguments: dict) -> str | None:
    connection = pika.BlockingConnection(broker.parameters())
    try:
        connection.channel().queue_declare(queue, durable=True, arguments=arguments)
    except pika.exceptions.ChannelClosedByBroker as exc:
        return f"{exc.reply_code} {exc.reply_text}"
    finally:
        if connection.is_open:
            connection.close()
    return None


QUEUES = {"plain": {}, "key-shared": {"x-subscription-type": "key-shared"}}


def run_all(args: argparse.Namespace) -> dict:
    results: dict = {}
    with tempfile.TemporaryDirectory(dir=Path.cwd(), prefix="bench-") as directory:
        running = start_gateway(Path(directory) / "data", Path(directory))
        host, _, port = running.amqp.rpartition(":")
        broker = Broker("gateway", host, int(port), running.pid, running.stop)
        try:
            for groups in GROUP_COUNTS:
                for _ in range(args.rounds):
                    for kind, arguments in QUEUES.items():
                        published, consumed = run_case(broker, arguments, args.messages, groups, args.consumers)
                        best = results.setdefault(groups, {}).get(kind)
                        if best is None or consumed.msgs_per_s > best["consume"].msgs_per_s:
                            results[groups][kind] = {"publish": published, "consume": consumed}
        finally:
            running.stop()
    return results


def report(results: dict, args: argparse.Namespace) -> str:
    lines = [f"{args.messages:,} messages of {MESSAGE_BYTES} B, {args.consumers} consumers (prefetch {PREFETCH}), "
             f"best of {args.rounds}", "",
             "| groups | queue | publish msg/s | consume msg/s | consume CPU s/M msgs | consume vs plain |",
             "|---|---|---|---|---|---|"]
    for groups, by_kind in results.items():
        plain = by_kind["plain"]["consume"].msgs_per_s
        for kind, phases in by_kind.items():
            consume = phases["consume"]
            lines.append(f"| {groups:,} | {kind} | {phases['publish'].msgs_per_s:,.0f} | {consume.msgs_per_s:,.0f} | "
                         f"{consume.cpu_s_per_million:.1f} | {consume.msgs_per_s / plain:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results = run_all(args)
    print(report(results, args))
    if args.json:
        args.json.write_text(json.dumps({str(g): {k: {p: asdict(v) for p, v in phases.items()}
                                                  for k, phases in by_kind.items()}
                                         for g, by_kind in results.items()}, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])

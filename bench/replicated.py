"""Replicated storage against the embedded default, in one run, through a real gateway.

Setups (each a real process tree started here):
  - embedded: one `gateway serve`, in-process bookie, E = Qw = Qa = 1;
  - E3-Qw3-Qa2 and E3-Qw2-Qa2: `gateway cluster up` as a library (ZooKeeper, 3 `gateway bookie`
    processes, one `gateway serve` in replicated mode).
For each: confluent-kafka produces N messages of 1 KiB (acks=all, idempotent) over 8 partitions and
consumes them back (bench/kafka.py's phases), then end-to-end latency at a fixed rate (p50/p99).
CPU is summed over the gateway and its bookies. The figure to read is the ratio to embedded.

Then, on the E3-Qw3-Qa2 cluster, the time to recover a ledger whose writer died (fence on the
bookies, find the end, close), as a new owner would after a crash: measured with the ledger client.

    python -m bench.replicated [--messages 100000] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from bench.kafka import (Latency, Phase, create_topics_admin, consume, make_payloads, measure_latency,
                         produce)
from bench.reference import start_gateway
from gateway.cluster.launcher import ClusterSpec, LocalCluster
from storage.ledger.client import LedgerClient
from storage.ledger.registered import RegisteredBookies
from storage.metadata.zookeeper import ZooKeeperMetadataStore

PARTITIONS = 8
LATENCY_LINGER_MS = 1          # the latency phase's producer linger.ms, as bench/kafka.py's default
SETUPS = {"embedded": None, "E3-Qw3-Qa2": (3, 3, 2), "E3-Qw2-Qa2": (3, 2, 2)}


class _Processes:
    """The CPU of several processes as one (psutil.Process's cpu_times, summed)."""

    def __init__(self, pids: list[int]) -> None:
        self._processes = [psutil.Process(pid) for pid in pids]

    def cpu_times(self):
        total = [0.0, 0.0]
        for process in self._processes:
            times = process.cpu_times()
            total[0] += times.user
            total[1] += times.system
        return type("Times", (), {"user": total[0], "system": total[1]})


@dataclass
class SetupResult:
    produce: Phase
    consume: Phase
    latency: Latency
    errors: list[str]


def run_setup(name: str, quorum, work_dir: Path, args: argparse.Namespace, payloads) -> tuple[SetupResult, float]:
    errors: list[str] = []
    cluster = broker = None
    if quorum is None:
        broker = start_gateway(work_dir / name, work_dir)
        bootstrap, pids = broker.bootstrap, [broker.proc.pid]
    else:
        cluster = LocalCluster(ClusterSpec(data_dir=work_dir / name, bookies=3, brokers=1, ensemble=quorum[0],
                                           write_quorum=quorum[1], ack_quorum=quorum[2], log_level="warning"))
        ready = cluster.start()
        bootstrap = ready["brokers"][0]["kafka"]
        pids = [b["pid"] for b in ready["bookies"]] + [ready["brokers"][0]["pid"]]
    recovery_ms = float("nan")
    try:
        create_topics_admin(bootstrap, {"bench": PARTITIONS, "latency": PARTITIONS})
        processes = _Processes(pids)
        produced = produce(bootstrap, "bench", PARTITIONS, "none", args.messages, payloads, processes, errors)
        consumed = consume(bootstrap, "bench", PARTITIONS, args.messages, processes, errors)
        latency = measure_latency(bootstrap, "latency", PARTITIONS, args.rate, args.seconds, LATENCY_LINGER_MS,
                                  processes, errors)
        if cluster is not None and quorum == (3, 3, 2):
            recovery_ms = asyncio.run(time_recovery(cluster))
    finally:
        if cluster is not None:
            cluster.stop()
        if broker is not None:
            broker.stop()
    return SetupResult(produced, consumed, latency, errors), recovery_ms


async def time_recovery(cluster: LocalCluster, entries: int = 1000, rounds: int = 5) -> float:
    """Median ms to recover a ledger left open by a writer that stopped mid-stream."""
    store = await ZooKeeperMetadataStore.open(cluster.metadata_url)
    secret = (cluster.dir / "secret").read_text().strip().encode()
    bookies = RegisteredBookies(store, secret, request_timeout_s=5.0)
    await bookies.start()
    client = LedgerClient(store, bookies, ensemble_size=3, write_quorum=3, ack_quorum=2)
    samples = []
    try:
        for _ in range(rounds):
            writer = await client.create()
            await asyncio.gather(*(writer.add(b"x" * 1024) for _ in range(entries)))
            started = time.perf_counter()
            recovered = await LedgerClient(store, bookies, ensemble_size=3, write_quorum=3,
                                           ack_quorum=2).open(writer.ledger_id)
            samples.append((time.perf_counter() - started) * 1000)
            assert recovered.last_add_confirmed == entries - 1
    finally:
        await bookies.close()
        await store.close()
    return statistics.median(samples)


def report(results: dict[str, SetupResult], recovery_ms: float, args: argparse.Namespace) -> str:
    base = results.get("embedded")
    lines = [f"Replicated vs embedded, {args.messages} x 1 KiB, {PARTITIONS} partitions, acks=all idempotent "
             f"(confluent-kafka); latency at {args.rate}/s for {args.seconds:.0f} s", "",
             f"{'setup':<12} {'produce msg/s':>14} {'MB/s':>7} {'ratio':>6} {'consume msg/s':>14} {'ratio':>6} "
             f"{'CPU s/M prod':>12} {'p50 ms':>7} {'p99 ms':>7}"]
    for name, r in results.items():
        ratio_p = r.produce.msgs_per_s / base.produce.msgs_per_s if base else float("nan")
        ratio_c = r.consume.msgs_per_s / base.consume.msgs_per_s if base else float("nan")
        lines.append(f"{name:<12} {r.produce.msgs_per_s:>14,.0f} {r.produce.mb_per_s:>7.1f} {ratio_p:>6.2f} "
                     f"{r.consume.msgs_per_s:>14,.0f} {ratio_c:>6.2f} {r.produce.cpu_s_per_million:>12.1f} "
                     f"{r.latency.p50_ms:>7.2f} {r.latency.p99_ms:>7.2f}")
        for error in r.errors:
            lines.append(f"    ! {error}")
    lines += ["", f"ledger recovery after its writer died (1,000 entries, E3-Qw3-Qa2): median {recovery_ms:.1f} ms"]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=1000, help="latency phase: messages per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="latency phase: duration")
    parser.add_argument("--setups", default=",".join(SETUPS), help="comma-separated: " + ", ".join(SETUPS))
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    payloads = make_payloads()
    results: dict[str, SetupResult] = {}
    recovery_ms = float("nan")
    with tempfile.TemporaryDirectory(prefix="bench-replicated-") as tmp:
        for name in args.setups.split(","):
            results[name], measured = run_setup(name, SETUPS[name], Path(tmp), args, payloads)
            if measured == measured:
                recovery_ms = measured
    print(report(results, recovery_ms, args))
    if args.json:
        args.json.write_text(json.dumps({"setups": {n: asdict(r) for n, r in results.items()},
                                         "ledger_recovery_ms": recovery_ms}, indent=2))


if __name__ == "__main__":
    main()

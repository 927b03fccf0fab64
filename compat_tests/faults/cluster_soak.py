"""The replicated-storage soak: a local cluster (ZooKeeper, 4 bookies, one gateway, E=3 Qw=3 Qa=2)
under Kafka and AMQP load for minutes, with a random fault every few seconds, then a drain and the
checkers' verdicts.

    python -m compat_tests.faults.cluster_soak --minutes 10 [--seed N] [--out DIR] [--zookeepers 3]
    (or: make soak-cluster [ARGS="--zookeepers 3"])

Faults, drawn from a seeded random source: kill -9 of a bookie and its restart; kill -9 of two
bookies at once (Qw - Qa + 1 = 2 left: writers go on with fewer copies); SIGSTOP of a bookie past
the bookie timeout; kill -9 of the gateway and its restart (its open ledgers are recovered by fencing);
with --zookeepers 3 (an ensemble), kill -9 of a ZooKeeper member, the leader as likely as another, and
its restart.
The last line is `cluster-soak: minutes=... faults=... acked=... lost=0 ...`; exit status 1 on any
violation. Histories and every process's log stay in --out.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path

from compat_tests.faults.harness.scenarios import Workloads
from compat_tests.faults.harness.soaking import soak_options, soak_report
from gateway.cluster.launcher import ClusterSpec, LocalCluster

BOOKIE_TIMEOUT_MS = 1500


def main(argv: list[str] | None = None) -> int:
    ensemble = argparse.ArgumentParser(add_help=False)
    ensemble.add_argument("--zookeepers", type=int, default=1, help="members of the ZooKeeper ensemble")
    known, rest = ensemble.parse_known_args(argv)
    options = soak_options("cluster-soak", __doc__, rest, every=(2.0, 6.0))
    return run(options.minutes, options.rng, options.out, options.every, zookeepers=known.zookeepers)


def run(minutes: float, rng: random.Random, out: Path, every: tuple[float, float], *, zookeepers: int = 1) -> int:
    cluster = LocalCluster(ClusterSpec(data_dir=out / "cluster", bookies=4, brokers=1, ensemble=3, write_quorum=3,
                                       ack_quorum=2, racks=2, log_level="warning", zookeepers=zookeepers,
                                       extra_storage={"bookie_timeout_ms": BOOKIE_TIMEOUT_MS}))
    faults = ["kill9-bookie", "kill9-two-bookies", "pause-bookie", "kill9-gateway"]
    if zookeepers >= 3:     # a majority survives one member's loss
        faults.append("kill9-zookeeper")
    counts: Counter[str] = Counter()
    workloads = None
    verdicts = []
    try:
        ready = cluster.start()
        broker = ready["brokers"][0]
        host, _, port = broker["amqp"].rpartition(":")
        workloads = Workloads([broker["kafka"]], [(host, int(port))], partitions=4).start()
        deadline = time.monotonic() + minutes * 60
        while time.monotonic() < deadline:
            workloads.wait_for_progress()
            time.sleep(rng.uniform(*every))
            fault = rng.choice(faults)
            counts[fault] += 1
            _inject(fault, cluster, workloads, rng)
            print(f"cluster-soak: {sum(counts.values())} faults ({fault} last), {workloads.acked()} acknowledged",
                  flush=True)
        workloads.wait_for_progress()
        workloads.stop()
        workloads.drain()
        verdicts = workloads.verdicts("cluster-soak")
    finally:
        if workloads is not None:
            for workload in workloads.running:
                workload.stopping.set()
            workloads.dump(out, "cluster-soak")
        cluster.stop()
    return soak_report("cluster-soak", minutes, counts, verdicts,
                       workloads.histories if workloads is not None else [])


def _inject(fault: str, cluster: LocalCluster, workloads: Workloads, rng: random.Random) -> None:
    if fault == "kill9-zookeeper":
        member = rng.choice(cluster.zookeeper.nodes)
        leading = member.mode() == "leader"
        member.kill()
        workloads.fault(fault, address=member.address, leader=leading)
        time.sleep(rng.uniform(0.5, 3.0))
        member.start()
        return
    if fault == "kill9-gateway":
        broker = cluster.brokers[0]
        broker.kill()
        workloads.fault(fault)
        cluster.restart(broker)
        return
    victims = rng.sample(cluster.bookies, 2 if fault == "kill9-two-bookies" else 1)
    if fault == "pause-bookie":
        victims[0].signal(signal.SIGSTOP)
        workloads.fault(fault, bookie=victims[0].name)
        time.sleep(BOOKIE_TIMEOUT_MS / 1000 * rng.uniform(1.5, 3.0))
        victims[0].signal(signal.SIGCONT)
        return
    for victim in victims:
        victim.kill()
    workloads.fault(fault, bookies=[v.name for v in victims])
    time.sleep(rng.uniform(0.5, 3.0))   # the writers work around them meanwhile
    for victim in victims:
        cluster.restart(victim)


if __name__ == "__main__":
    sys.exit(main())

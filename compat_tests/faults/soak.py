"""The fault soak: one gateway under Kafka and AMQP load for minutes, with a random fault every few
seconds, then a drain and the checkers' verdicts.

    python -m compat_tests.faults.soak --minutes 10 [--seed N] [--out DIR]     (or: make soak)

Faults, drawn from a seeded random source: kill -9 and restart; SIGSTOP for 1-4 s; power loss,
clean or torn (the data directory is on the lazy FUSE filesystem; skipped where FUSE is missing); on the
client links through TCP proxies, a blackhole, a 300 ms delay, a half-open link and resets. The last
line is `soak: minutes=... faults=... acked=... lost=0 ...`; the exit status is 1 on any violation.
Histories (JSON lines) and gateway logs stay in --out.
"""

from __future__ import annotations

import contextlib
import random
import sys
import time
from collections import Counter
from pathlib import Path

from compat_tests.faults.harness import lazyfs, signals
from compat_tests.faults.harness.lazyfs import LazyFsMount
from compat_tests.faults.harness.nodes import GatewayNode
from compat_tests.faults.harness.proxy import TcpProxy
from compat_tests.faults.harness.scenarios import Workloads, power_loss
from compat_tests.faults.harness.soaking import soak_options, soak_report

PROXY_HOST = "127.0.0.2"  # the gateway advertises it; the proxies listen there on the gateway's ports


def main(argv: list[str] | None = None) -> int:
    options = soak_options("soak", __doc__, argv, every=(3.0, 8.0))
    return run(options.minutes, options.rng, options.out, options.every)


def run(minutes: float, rng: random.Random, out: Path, every: tuple[float, float]) -> int:
    mount = None
    if (reason := lazyfs.unavailable_reason()) is None:
        mount = LazyFsMount(out / "disk", out / "mnt").start()
    else:
        print(f"soak: no power-loss faults: {reason}", flush=True)
    node = GatewayNode(out, mount.mountpoint if mount else out / "data", "--kafka-advertised-host", PROXY_HOST)
    proxies: list[TcpProxy] = []
    counts: Counter[str] = Counter()
    workloads = None
    try:
        node.start()
        for name in ("kafka", "amqp"):
            port = int(node.ports[name])
            proxies.append(TcpProxy(("127.0.0.1", port), listen=(PROXY_HOST, port)).start())
        workloads = Workloads([f"{PROXY_HOST}:{node.ports['kafka']}"], [(PROXY_HOST, int(node.ports["amqp"]))],
                              partitions=4).start()
        faults = ["kill9", "pause", "blackhole", "delay", "half-open", "reset"]
        faults += ["power-loss", "torn-power-loss"] if mount else []
        deadline = time.monotonic() + minutes * 60
        while time.monotonic() < deadline:
            workloads.wait_for_progress()
            time.sleep(rng.uniform(*every))
            fault = rng.choice(faults)
            counts[fault] += 1
            if fault == "kill9":
                node.kill()
                workloads.fault("kill9")
                node.restart()
            elif fault in ("power-loss", "torn-power-loss"):
                torn_seed = rng.randrange(1 << 32) if fault == "torn-power-loss" else None
                mount, _ = power_loss(node, mount, workloads, torn_seed=torn_seed)
            elif fault == "pause":
                with signals.paused(node.pid):
                    workloads.fault("pause")
                    time.sleep(rng.uniform(1.0, 4.0))
            else:
                _network_fault(fault, proxies, workloads, rng)
            print(f"soak: {sum(counts.values())} faults ({fault} last), {workloads.acked()} acknowledged", flush=True)
        workloads.wait_for_progress()
        workloads.stop()
        workloads.drain()
        verdicts = workloads.verdicts("soak")
        histories = workloads.histories
    finally:
        if workloads is not None:  # kept for a second look, also when the run broke off
            for workload in workloads.running:
                workload.stopping.set()
            workloads.dump(out, "soak")
        for proxy in proxies:
            proxy.close()
        with contextlib.suppress(Exception):
            node.stop()
        if mount is not None:
            mount.close()
    return soak_report("soak", minutes, counts, verdicts, histories)


def _network_fault(fault: str, proxies: list[TcpProxy], workloads: Workloads, rng: random.Random) -> None:
    for proxy in proxies:
        if fault == "blackhole":
            proxy.drop()
        elif fault == "delay":
            proxy.delay(300)
        elif fault == "half-open":
            proxy.half_open(rng.choice(["upstream", "downstream"]))
        else:
            proxy.reset()
    workloads.fault(fault)
    time.sleep(rng.uniform(1.0, 5.0))
    for proxy in proxies:
        proxy.heal()


if __name__ == "__main__":
    sys.exit(main())

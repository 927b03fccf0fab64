"""Fault scenarios shared by the fault tests and the soak: workloads running while a nemesis acts.

`Workloads` runs a Kafka and an AMQP workload against one set of addresses, each with its own
history, logs every fault into both, and turns the finished histories into verdicts.
The scenario functions take a node (anything with `kill()` and `restart()`, see nodes.py) and act
on it in rounds; each round first waits until acknowledgements flow, so every fault lands under
load and every recovery is shown to serve again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path

from compat_tests.faults.harness import signals
from compat_tests.faults.harness.checkers import Verdict, check_log, check_queue
from compat_tests.faults.harness.history import FAIL, INFO, OK, History
from compat_tests.faults.harness.lazyfs import LazyFsMount
from compat_tests.faults.harness.netns import NetNamespace
from compat_tests.faults.harness.workloads import AmqpWorkload, KafkaWorkload

PROGRESS_DEADLINE_S = 90.0  # generous: a loaded two-core machine, a restart and client back-offs


class Workloads:
    def __init__(self, kafka_bootstrap: Sequence[str] | None, amqp_addresses: Sequence[tuple[str, int]] | None,
                 netns: NetNamespace | None = None, amqp_queue: str | None = None, **kafka_options) -> None:
        """With `netns`, every client connects from inside that network namespace; `amqp_queue`:
        the AMQP workload's queue (default: a fresh name)."""
        self.kafka_history, self.amqp_history = History(), History()
        self.kafka = KafkaWorkload(kafka_bootstrap, self.kafka_history, **kafka_options) if kafka_bootstrap else None
        self.amqp = AmqpWorkload(amqp_addresses, self.amqp_history, amqp_queue) if amqp_addresses else None
        self.netns = netns
        for workload in self.running:
            workload.enter = netns.enter if netns is not None else None
        self.faults = 0

    def _call(self, function):
        return self.netns.call(function) if self.netns is not None else function()

    @property
    def running(self) -> list:
        return [workload for workload in (self.kafka, self.amqp) if workload is not None]

    @property
    def histories(self) -> list[History]:
        return [workload.history for workload in self.running]

    def start(self) -> "Workloads":
        if self.kafka is not None:
            self._call(self.kafka.create_topic)
        for workload in self.running:
            workload.start()
        return self

    def stop(self) -> None:
        for workload in self.running:
            workload.stop()

    def drain(self) -> None:
        for workload in self.running:
            self._call(workload.drain)

    def fault(self, name: str, **details: object) -> None:
        self.faults += 1
        for history in self.histories:
            history.fault(name, **details)

    def acked(self) -> int:
        return sum(history.count(OK) for history in self.histories)

    def wait_for_progress(self, acks: int = 50, deadline_s: float = PROGRESS_DEADLINE_S, at_least: int = 0) -> None:
        """Block until every workload got `acks` more acknowledgements, and `at_least` in all (so a
        slow machine still makes a run thick enough for its verdict)."""
        targets = [(history, max(history.count(OK) + acks, at_least)) for history in self.histories]
        deadline = time.monotonic() + deadline_s
        for history, target in targets:
            while history.count(OK) < target:
                assert time.monotonic() < deadline, (
                    f"no progress: {history.count(OK)} of {target} acknowledgements after {deadline_s}s")
                time.sleep(0.1)

    def wait_for_refusals(self, after: float, deadline_s: float = 60.0) -> None:
        """Block until every workload saw a send fail or end unknown after `after` (monotonic)."""
        deadline = time.monotonic() + deadline_s
        for history in self.histories:
            while not any(e["type"] in (FAIL, INFO) and e["t"] > after for e in history.events):
                assert time.monotonic() < deadline, f"no send refused within {deadline_s}s"
                time.sleep(0.1)

    def verdicts(self, name: str) -> list[Verdict]:
        found = []
        if self.kafka is not None:
            found.append(check_log(self.kafka_history, f"{name}-kafka"))
        if self.amqp is not None:
            found.append(check_queue(self.amqp_history, f"{name}-amqp"))
        return found

    def dump(self, directory: Path, name: str) -> None:
        """Keep the histories as JSON lines, for a second look at a failed run."""
        for label, workload in (("kafka", self.kafka), ("amqp", self.amqp)):
            if workload is not None:
                workload.history.dump(directory / f"{name}-{label}.jsonl")


def settle(verdicts: Sequence[Verdict], min_acked: int = 1) -> None:
    """Print each verdict's line and fail on any violation."""
    for verdict in verdicts:
        print(verdict.line())
    for verdict in verdicts:
        verdict.assert_ok(min_acked)


def crash_rounds(node, workloads: Workloads, rounds: int, rng: random.Random,
                 up_s: tuple[float, float] = (0.5, 2.0)) -> None:
    """kill -9 the node under load, restart it on the same data, `rounds` times."""
    for round_ in range(rounds):
        workloads.wait_for_progress()
        time.sleep(rng.uniform(*up_s))
        node.kill()
        workloads.fault("kill9", round=round_, pid=node.process.proc.pid)
        node.restart()
    workloads.wait_for_progress()


def pause_rounds(node, workloads: Workloads, rounds: int, rng: random.Random,
                 paused_s: tuple[float, float] = (1.0, 4.0)) -> None:
    """SIGSTOP the node under load for a while, then SIGCONT, `rounds` times."""
    for round_ in range(rounds):
        workloads.wait_for_progress()
        seconds = rng.uniform(*paused_s)
        with signals.paused(node.pid):
            workloads.fault("pause", round=round_, seconds=round(seconds, 2))
            time.sleep(seconds)
    workloads.wait_for_progress()


def power_loss(node, mount: LazyFsMount, workloads: Workloads, *, remount: bool = True,
               torn_seed: int | None = None) -> tuple[LazyFsMount, dict]:
    """Kill the node and drop everything its lazy filesystem holds unsynced (with `torn_seed`, a
    random part of it survives). Then restart it: on the filesystem mounted again (for more rounds),
    or with `remount=False` on the backing directory itself, as after a real power loss. Returns the
    mount now in use and what was dropped."""
    node.kill()
    report = mount.power_off(torn_seed)
    workloads.fault("power-loss", torn_seed=torn_seed, **report)
    if remount:
        mount = LazyFsMount(mount.backing, mount.mountpoint).start()
        node.restart()
    else:
        node.restart(data_dir=mount.backing)
    return mount, report


def power_loss_rounds(node, mount: LazyFsMount, workloads: Workloads, rounds: int, rng: random.Random,
                      up_s: tuple[float, float] = (0.5, 2.0), torn: bool = False) -> list[dict]:
    """The node runs on `mount` (a started lazy filesystem); `rounds` power losses under load (torn
    ones with `torn`), the last one restarting on the backing directory. Returns what each dropped."""
    reports = []
    try:
        for round_ in range(rounds):
            workloads.wait_for_progress()
            time.sleep(rng.uniform(*up_s))
            mount, report = power_loss(node, mount, workloads, remount=round_ < rounds - 1,
                                       torn_seed=rng.randrange(1 << 32) if torn else None)
            reports.append(report)
        workloads.wait_for_progress()
    finally:
        mount.close()
    return reports

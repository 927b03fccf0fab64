"""Fixtures of the fault tests: gateway nodes killed at teardown, a seeded random source, a lazy
filesystem, and the workloads (stopped at teardown, their histories kept in the test's tmp_path)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import pytest

from compat_tests.faults.harness import lazyfs
from compat_tests.faults.harness.lazyfs import LazyFsMount
from compat_tests.faults.harness.nodes import GatewayNode
from compat_tests.faults.harness.scenarios import Workloads


@pytest.fixture
def rng(request) -> random.Random:
    seed = int(os.environ.get("FAULTS_SEED", random.randrange(1 << 32)))
    print(f"FAULTS_SEED={seed}")  # shown with a failure's captured output: re-run with it
    return random.Random(seed)


@pytest.fixture
def nodes(tmp_path) -> Iterator[list[GatewayNode]]:
    """Append the nodes a test starts; they are killed at teardown."""
    started: list[GatewayNode] = []
    yield started
    for node in started:
        node.kill()


@pytest.fixture
def lazy_mount(tmp_path) -> Iterator[LazyFsMount]:
    """A started lazy filesystem over tmp_path/"disk" at tmp_path/"mnt" (skips where it cannot be)."""
    if (reason := lazyfs.unavailable_reason()) is not None:
        pytest.skip(f"lazy filesystem: {reason}")
    mount = LazyFsMount(tmp_path / "disk", tmp_path / "mnt").start()
    yield mount
    mount.close()


@pytest.fixture
def workloads_for(tmp_path, request) -> Iterator:
    """`workloads_for(kafka_bootstrap, amqp_addresses, **kafka_options)` -> started Workloads."""
    made: list[Workloads] = []

    def make(kafka_bootstrap, amqp_addresses, **options) -> Workloads:
        workloads = Workloads(kafka_bootstrap, amqp_addresses, **options)
        made.append(workloads)
        return workloads.start()

    yield make
    for workloads in made:
        for workload in workloads.running:
            workload.stopping.set()
        workloads.dump(tmp_path, request.node.name)


@pytest.fixture
def healthy(cluster):
    """For modules with a shared `cluster` (a LocalCluster): every process runs again after the test."""
    yield cluster
    cluster.heal()

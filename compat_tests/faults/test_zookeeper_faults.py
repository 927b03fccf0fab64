"""ZooKeeper that fails: a three-member ensemble (`gateway cluster up --zookeepers 3`) under two
brokers, three bookies (E=3, Qw=3, Qa=2) and Kafka (confluent-kafka, idempotent) and AMQP (pika,
confirms) load throughout.

- kill -9 of one member, then of the ensemble's leader (found with the `srvr` four-letter word): the
  other two go on serving (a new leader is elected), clients of ZooKeeper move to them, and the
  brokers keep serving after at most a short suspension of their sessions;
- the whole ensemble killed for twice the session timeout, then started again: while it is gone
  every broker serves nothing (Produce answers NOT_LEADER_OR_FOLLOWER, new AMQP connections are
  closed with CONNECTION_FORCED, nothing is acknowledged), and once it is back the same broker
  processes serve again by themselves, without a restart.

Each test ends with the checkers' verdict (nothing acknowledged lost, no offset holding two values,
no reordering, no duplicate from the idempotent producer).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time

import pika
import pika.exceptions
import pytest

from compat_tests.faults.harness.balance import wait_until_balanced
from compat_tests.faults.harness.checkers import unavailability
from compat_tests.faults.harness.history import FAIL, INVOKE, OK
from compat_tests.faults.harness.scenarios import settle
from compat_tests.faults.test_broker_cluster import produce_v3, read_produce_v3_error
from gateway.cluster.launcher import ClusterSpec, LocalCluster
from gateway.cluster.zookeeper import four_letter_word

SESSION_TIMEOUT_MS = 4000
MIN_ACKED = 100   # AMQP confirms take ~0.25 s each on a loaded 2-core machine
NOT_LEADER_OR_FOLLOWER = 6
CONNECTION_FORCED = 320
NOTICE_S = 1.0      # a broker sees its ZooKeeper connection drop at once (the killed JVM's sockets close)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spec = ClusterSpec(data_dir=tmp_path_factory.mktemp("ensemble"), zookeepers=3, bookies=3, brokers=2,
                       ensemble=3, write_quorum=3, ack_quorum=2,
                       extra_storage={"zookeeper_session_timeout_ms": SESSION_TIMEOUT_MS, "bookie_timeout_ms": 1500})
    local = LocalCluster(spec)
    local.start()
    yield local
    local.stop()


@pytest.fixture
def ensemble(cluster):
    """The module's cluster, with every ZooKeeper member and every other process running after the test."""
    yield cluster
    for node in cluster.zookeeper.nodes:
        if not node.alive():
            node.launch()
    cluster.zookeeper.wait_serving()
    cluster.heal()


def start_workloads(cluster, workloads_for):
    wait_until_balanced(cluster)
    amqp = []
    for broker in cluster.brokers:
        host, _, port = broker.ready["amqp"].rpartition(":")
        amqp.append((host, int(port)))
    return workloads_for([b.ready["kafka"] for b in cluster.brokers], amqp, partitions=4)


def finish(workloads, name: str) -> None:
    workloads.stop()
    workloads.drain()
    settle(workloads.verdicts(name), MIN_ACKED)
    for history in workloads.histories:
        print(name, "unavailable after each fault (s):", [round(s, 2) for s in unavailability(history)])


def modes(cluster) -> list[str | None]:
    return [node.mode() for node in cluster.zookeeper.nodes]


def wait_for_member(cluster, mode: str, deadline_s: float = 60.0):
    """A member in `mode` (leader or follower), once one answers so."""
    deadline = time.monotonic() + deadline_s
    while (member := next((n for n in cluster.zookeeper.nodes if n.mode() == mode), None)) is None:
        assert time.monotonic() < deadline, f"no ZooKeeper {mode}: {modes(cluster)}"
        time.sleep(0.1)
    return member


def acked_while_down(history, down_from: float, down_until: float) -> list[str]:
    """Values sent after `down_from` and acknowledged before `down_until` (monotonic times)."""
    events = history.events
    invoked = {e["op"]: e for e in events if e["type"] == INVOKE}
    return [invoked[e["op"]]["value"] for e in events
            if e["type"] == OK and down_from < invoked[e["op"]]["t"] and e["t"] < down_until]


def produce_errors(cluster, topic: str) -> list[int]:
    """The error code of a Produce v3 of one record to partition 0, sent to every broker."""
    codes = []
    for index, broker in enumerate(cluster.brokers):
        host, _, port = broker.ready["kafka"].rpartition(":")
        with socket.create_connection((host, int(port)), timeout=20) as sock:
            sock.sendall(produce_v3(topic, 0, b"while-zookeeper-is-gone", index + 1))
            codes.append(read_produce_v3_error(sock))
    return codes


def amqp_login_refusal(broker) -> int | None:
    """The reply code of the connection.close a new AMQP connection gets (None: it was accepted)."""
    host, _, port = broker.ready["amqp"].rpartition(":")
    try:
        connection = pika.BlockingConnection(pika.ConnectionParameters(
            host, int(port), connection_attempts=1, socket_timeout=20, stack_timeout=30))
    except pika.exceptions.AMQPConnectionError as exc:
        # pika wraps a close during the handshake: ProbableAuthenticationError("ConnectionClosedByBroker: (320) ...")
        found = re.search(r"\((\d{3})\)", repr(exc))
        assert found is not None, f"the connection ended without a connection.close: {exc!r}"
        return int(found.group(1))
    connection.close()
    return None


# --- tests ----------------------------------------------------------------------------------------


def test_the_ready_line_lists_every_member_of_the_ensemble_one_leading(cluster) -> None:
    ready = json.loads(json.dumps(cluster.ready()))        # as `gateway cluster up` prints it
    members = ready["zookeepers"]
    assert len(members) == 3 and ready["zookeeper"] == ",".join(m["address"] for m in members)
    found = []
    for member in members:
        host, _, port = member["address"].rpartition(":")
        found.append(next(line.removeprefix("Mode: ") for line in four_letter_word(host, int(port), "srvr")
                          .splitlines() if line.startswith("Mode: ")))
        with open(f"/proc/{member['pid']}/cmdline", "rb") as cmdline:
            assert b"QuorumPeerMain" in cmdline.read()
    assert sorted(found) == ["follower", "follower", "leader"]
    assert sorted(p.name for p in cluster.dir.iterdir() if p.name.startswith("zookeeper")) == [
        "zookeeper-1", "zookeeper-2", "zookeeper-3"]


def test_cluster_up_takes_the_size_of_the_ensemble_from_its_flag(tmp_path) -> None:
    command = [sys.executable, "-m", "gateway", "cluster", "up", "--zookeepers", "0", "--data-dir", str(tmp_path)]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "--zookeepers must be at least 1" in refused.stderr


def test_kill9_of_one_zookeeper_then_of_the_leader_under_load_loses_nothing(ensemble, workloads_for) -> None:
    workloads = start_workloads(ensemble, workloads_for)
    brokers = [b.pid for b in ensemble.brokers]
    for round_ in ("follower", "leader"):
        workloads.wait_for_progress(50)
        victim = wait_for_member(ensemble, round_)
        pid = victim.pid
        victim.kill()
        workloads.fault(f"kill9-zookeeper-{round_}", address=victim.address, pid=pid)
        new_leader = wait_for_member(ensemble, "leader")
        workloads.wait_for_progress(50)        # two members of three serve: so do the brokers
        print(f"kill -9 of the ZooKeeper {round_} {victim.address}: members now {modes(ensemble)}, "
              f"leader {new_leader.address}")
        victim.start()
        workloads.fault(f"restart-zookeeper-{round_}", address=victim.address)
    workloads.wait_for_progress(50)
    assert [b.pid for b in ensemble.brokers] == brokers and all(b.alive() for b in ensemble.brokers)
    finish(workloads, "kill9-zookeeper")


def test_the_whole_ensemble_gone_past_the_session_timeout_stops_service_which_resumes_without_a_restart(
        ensemble, workloads_for) -> None:
    workloads = start_workloads(ensemble, workloads_for)
    brokers = [b.pid for b in ensemble.brokers]
    workloads.wait_for_progress(50)
    killed_at = time.monotonic()
    for node in ensemble.zookeeper.nodes:
        node.kill()
    workloads.fault("zookeeper-ensemble-down", seconds=2 * SESSION_TIMEOUT_MS / 1000)
    time.sleep(NOTICE_S)
    down_from = time.monotonic()
    assert produce_errors(ensemble, workloads.kafka.topic) == [NOT_LEADER_OR_FOLLOWER] * len(ensemble.brokers)
    refusal = amqp_login_refusal(ensemble.brokers[0])
    time.sleep(max(0.0, killed_at + 2 * SESSION_TIMEOUT_MS / 1000 - time.monotonic()))
    down_until = time.monotonic()
    for node in ensemble.zookeeper.nodes:
        node.launch()
    workloads.fault("zookeeper-ensemble-back")
    ensemble.zookeeper.wait_serving()
    workloads.wait_for_progress(50)
    for history in workloads.histories:
        assert acked_while_down(history, down_from, down_until) == []
    assert [b.pid for b in ensemble.brokers] == brokers and all(b.alive() for b in ensemble.brokers)
    nacked = sum(1 for e in workloads.amqp_history.events if e["type"] == FAIL and e["t"] > down_from)
    print(f"while ZooKeeper was gone: Produce -> error {NOT_LEADER_OR_FOLLOWER} from every broker, "
          f"a new AMQP connection -> connection.close {refusal}, {nacked} AMQP publishes nacked")
    assert refusal == CONNECTION_FORCED
    finish(workloads, "zookeeper-ensemble-down")

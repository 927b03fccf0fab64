"""Faults against one real `gateway serve` while Kafka and AMQP clients produce and consume.

Each test runs seconds, ends with the checkers' verdict lines (printed, then asserted): nothing
acknowledged is lost, no offset holds two values, one producer's values stay in order, the
idempotent producer stores no duplicate. `make soak` runs the same scenarios for minutes.
"""

from __future__ import annotations

import time

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from compat_tests.faults.harness import disk_full, fsync_errors, netns
from compat_tests.faults.harness.checkers import acked_after
from compat_tests.faults.harness.nodes import GatewayNode
from compat_tests.faults.harness.proxy import UPSTREAM, TcpProxy
from compat_tests.faults.harness.scenarios import crash_rounds, pause_rounds, power_loss_rounds, settle

MIN_ACKED = 200
READ_ONLY_LOG = "bookie turns read-only"
ADMIN = ("root", "root-secret")
ADMIN_CONFIG = f"""
[[users]]
name = "{ADMIN[0]}"
password = "{ADMIN[1]}"
tags = ["administrator"]
"""


def start_node(nodes: list[GatewayNode], tmp_path, data_dir=None, *args: str, **options) -> GatewayNode:
    node = GatewayNode(tmp_path, data_dir or tmp_path / "data", *args, **options)
    nodes.append(node)
    return node.start()


def finish(workloads, name: str) -> None:
    workloads.wait_for_progress(acks=0, at_least=MIN_ACKED)
    workloads.stop()
    workloads.drain()
    settle(workloads.verdicts(name), MIN_ACKED)


def test_kill9_of_the_gateway_under_load_loses_nothing(nodes, tmp_path, workloads_for, rng) -> None:
    node = start_node(nodes, tmp_path)
    workloads = workloads_for(node.kafka_bootstrap, node.amqp_addresses)
    crash_rounds(node, workloads, rounds=3, rng=rng)
    finish(workloads, "kill9")


def test_paused_gateway_loses_nothing(nodes, tmp_path, workloads_for, rng) -> None:
    node = start_node(nodes, tmp_path)
    workloads = workloads_for(node.kafka_bootstrap, node.amqp_addresses)
    pause_rounds(node, workloads, rounds=2, rng=rng)
    finish(workloads, "pause")


@pytest.mark.parametrize("torn", [False, True], ids=["clear", "torn"])
def test_power_loss_under_load_loses_nothing_acknowledged(nodes, tmp_path, lazy_mount, workloads_for, rng,
                                                          torn) -> None:
    node = start_node(nodes, tmp_path, lazy_mount.mountpoint)
    workloads = workloads_for(node.kafka_bootstrap, node.amqp_addresses)
    reports = power_loss_rounds(node, lazy_mount, workloads, rounds=2, rng=rng, torn=torn)
    print("power-off reports:", reports)
    # The fault must have had something to drop, or it proved nothing.
    assert all(report["unsynced_bytes"] > 0 for report in reports), reports
    finish(workloads, "power-loss")


def test_full_disk_refuses_writes_and_loses_nothing(nodes, tmp_path, workloads_for) -> None:
    if (reason := disk_full.unavailable_reason(tmp_path / "probe")) is not None:
        pytest.skip(f"full disk: {reason}")
    with disk_full.SmallDisk(tmp_path / "disk", size_mib=32) as disk:
        node = start_node(nodes, tmp_path, disk.path)
        workloads = workloads_for(node.kafka_bootstrap, node.amqp_addresses, message_timeout_ms=5000)
        workloads.wait_for_progress()

        disk.fill()
        full = time.monotonic()
        workloads.fault("disk-full")
        read_only = node.wait_for_log(READ_ONLY_LOG)
        workloads.wait_for_refusals(after=full)   # the clients are told: retriable error, nack
        time.sleep(1)  # let sends made after the bookie turned read-only complete (or not) too
        for history in workloads.histories:
            assert acked_after(history, read_only) == []

        # The bookie stays read-only once a journal write failed (it never retries a write that
        # may have half happened): freeing space is not enough, a restart brings it back.
        disk.free()
        workloads.fault("disk-freed")
        node.stop()
        node.restart()
        workloads.wait_for_progress()
        finish(workloads, "disk-full")
        node.stop()


@pytest.mark.skipif(fsync_errors.unavailable_reason() is not None,
                    reason=f"fsync failure: {fsync_errors.unavailable_reason()}")
def test_failed_fsync_turns_the_bookie_read_only_and_nothing_later_is_acknowledged(
        nodes, tmp_path, workloads_for) -> None:
    node = start_node(nodes, tmp_path, None, prefix=fsync_errors.PREFIX)
    workloads = workloads_for(node.kafka_bootstrap, node.amqp_addresses, message_timeout_ms=5000)
    workloads.wait_for_progress()

    errors = fsync_errors.FsyncErrors(node.pid)
    errors.enable()
    failing = time.monotonic()
    workloads.fault("fsync-eio")
    workloads.wait_for_refusals(after=failing)
    time.sleep(1)
    for history in workloads.histories:
        assert acked_after(history, failing) == []
    assert READ_ONLY_LOG in node.stderr

    errors.disable()
    node.kill()
    node.restart()
    workloads.wait_for_progress()
    finish(workloads, "fsync-eio")


def test_network_faults_between_clients_and_gateway_lose_nothing(nodes, tmp_path, workloads_for) -> None:
    # Kafka clients connect where Metadata points: the gateway advertises 127.0.0.2, where the
    # proxies listen on the gateway's own ports.
    node = start_node(nodes, tmp_path, None, "--kafka-advertised-host", "127.0.0.2")
    kafka_port, amqp_port = int(node.ports["kafka"]), int(node.ports["amqp"])
    with TcpProxy(("127.0.0.1", kafka_port), listen=("127.0.0.2", kafka_port)) as kafka_proxy, \
            TcpProxy(("127.0.0.1", amqp_port), listen=("127.0.0.2", amqp_port)) as amqp_proxy:
        proxies = (kafka_proxy, amqp_proxy)
        workloads = workloads_for([f"127.0.0.2:{kafka_port}"], [("127.0.0.2", amqp_port)])
        for name, act in (("delay-300ms", lambda proxy: proxy.delay(300)), ("drop", TcpProxy.drop),
                          ("half-open", TcpProxy.half_open), ("reset", TcpProxy.reset)):
            workloads.wait_for_progress()
            for proxy in proxies:
                act(proxy)
            workloads.fault(name)
            time.sleep(2)
            for proxy in proxies:
                proxy.heal()
        workloads.wait_for_progress()
        assert all(proxy.stats.stalls > 0 and proxy.stats.resets > 0 for proxy in proxies), [p.stats for p in proxies]
        finish(workloads, "network")


def test_iptables_partition_in_a_network_namespace_loses_nothing(nodes, tmp_path, workloads_for) -> None:
    if (reason := netns.unavailable_reason()) is not None:
        pytest.skip(f"network namespace: {reason}")
    with netns.NetNamespace() as namespace:
        node = start_node(nodes, tmp_path, None, prefix=namespace.prefix)
        workloads = workloads_for(node.kafka_bootstrap, node.amqp_addresses, netns=namespace)
        for round_ in range(2):
            workloads.wait_for_progress()
            for name in ("kafka", "amqp"):
                namespace.cut(int(node.ports[name]))
            workloads.fault("partition", round=round_)
            cut = time.monotonic()
            time.sleep(2)
            for history in workloads.histories:  # the cut held: nothing sent meanwhile got through
                assert acked_after(history, cut) == []
            namespace.heal()
        workloads.wait_for_progress()
        finish(workloads, "partition")


def test_a_batch_stored_but_unanswered_when_the_gateway_dies_is_stored_once(nodes, tmp_path) -> None:
    """Kafka's promise for an idempotent producer across a broker failure, at its sharpest point: the
    gateway stores a batch and is killed -9 before its answer reaches the producer (a proxy holds the
    answers back), and the producer's retry to the restarted gateway is answered with the stored
    offset instead of being stored a second time."""
    config = tmp_path / "gateway.toml"
    config.write_text(ADMIN_CONFIG)       # an administrator reads the partition's end through the admin API
    node = start_node(nodes, tmp_path, None, "--kafka-advertised-host", "127.0.0.2", "--config", str(config))
    port = int(node.ports["kafka"])
    topic = f"unanswered-{int(time.time() * 1000)}"
    end_offset_url = f"http://127.0.0.1:{node.ports['admin']}/api/v1/tenants/public/namespaces/default/topics/{topic}"
    with TcpProxy(("127.0.0.1", port), listen=("127.0.0.2", port)) as proxy:
        producer = Producer({"bootstrap.servers": f"127.0.0.2:{port}", "enable.idempotence": True, "acks": "all",
                             "linger.ms": 50, "request.timeout.ms": 4000, "message.timeout.ms": 90_000})
        delivered: list = []
        producer.produce(topic, b"before", partition=0, on_delivery=lambda error, m: delivered.append((error, m)))
        assert producer.flush(30) == 0 and delivered[0][0] is None
        proxy.half_open(UPSTREAM)                      # requests reach the gateway; answers are held
        for n in range(5):
            producer.produce(topic, f"unanswered-{n}".encode(), partition=0,
                             on_delivery=lambda error, m: delivered.append((error, m)))
        producer.poll(0)
        deadline = time.monotonic() + 30
        while httpx.get(end_offset_url, auth=ADMIN, timeout=5).json()["partitions"][0]["end_offset"] < 6:
            assert time.monotonic() < deadline, "the batch was never stored"
            time.sleep(0.05)
        node.kill()                                    # stored, durable, never answered
        node.restart()
        proxy.heal()
        assert producer.flush(60) == 0
    assert [(error, message.value()) for error, message in delivered[1:]] == \
        [(None, f"unanswered-{n}".encode()) for n in range(5)]
    assert [message.offset() for _, message in delivered] == list(range(6))
    consumer = Consumer({"bootstrap.servers": f"127.0.0.2:{port}", "group.id": topic, "enable.auto.commit": False})
    with TcpProxy(("127.0.0.1", port), listen=("127.0.0.2", port)):
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        stored = []
        deadline = time.monotonic() + 30
        while len(stored) < 6 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                stored.append(message.value())
        assert consumer.position([TopicPartition(topic, 0)])[0].offset == 6   # nothing after the six
        consumer.close()
    assert stored == [b"before", *(f"unanswered-{n}".encode() for n in range(5))]

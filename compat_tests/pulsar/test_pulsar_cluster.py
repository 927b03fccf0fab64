"""Pulsar lookups in a cluster of two brokers (`LocalCluster`: ZooKeeper, one bookie, two
`gateway serve`): whichever broker a client asks, LOOKUP names the broker that owns the topic's
bundle, the one Kafka's Metadata names as leader; and the official client, given either broker's
address, produces and consumes every topic through its owner.

A cluster takes most of a minute to start on a loaded machine, so this runs on its own:
`make test-pulsar-cluster` (GATEWAY_PULSAR_CLUSTER_TESTS=1)."""

from __future__ import annotations

import os
import signal
import socket

import httpx
import pulsar
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.conftest import wait_for
from compat_tests.pulsar.clients import receive_all, unique
from gateway.cluster.launcher import ClusterSpec, LocalCluster
from protocols.pulsar.codec.frames import FrameReader, decode_frame, encode_command
from protocols.pulsar.codec.pulsar_wire_pb2 import BaseCommand

pytestmark = pytest.mark.skipif(os.environ.get("GATEWAY_PULSAR_CLUSTER_TESTS") != "1",
                                reason="a cluster test: make test-pulsar-cluster")
TOPICS = 6
ADMIN = ("pulsar-admin", "pulsar-admin-secret")    # moves a partition through the admin API


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(ClusterSpec(tmp_path_factory.mktemp("pulsar-cluster") / "c", bookies=1, brokers=2,
                                       ensemble=1, write_quorum=1, ack_quorum=1, log_level="warning",
                                       extra_storage={"zookeeper_session_timeout_ms": 4000},
                                       extra_config=f'[[users]]\nname = "{ADMIN[0]}"\npassword = "{ADMIN[1]}"\n'
                                                    'tags = ["administrator"]\n'))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _lookup(address: str, topic: str) -> str:
    host, port = address.rsplit(":", 1)
    connect = BaseCommand(type=BaseCommand.CONNECT)
    connect.connect.client_version = "lookup-probe"
    connect.connect.protocol_version = 19
    lookup = BaseCommand(type=BaseCommand.LOOKUP)
    lookup.lookupTopic.topic = topic
    lookup.lookupTopic.request_id = 1
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(encode_command(connect) + encode_command(lookup))
        reader, commands = FrameReader(), []
        while len(commands) < 2:
            data = sock.recv(65536)
            assert data, "connection closed"
            commands += [decode_frame(frame).command for frame in reader.feed(data)]
    answer = commands[1].lookupTopicResponse
    assert answer.response == answer.Connect
    return answer.brokerServiceUrl


def test_lookups_name_the_owner_and_clients_reach_it_through_either_broker(cluster):
    brokers = cluster.ready()["brokers"]
    pulsar_of = {b["id"]: b["pulsar"] for b in brokers}
    admin = AdminClient({"bootstrap.servers": brokers[0]["kafka"]})
    topics = [unique("owned") for _ in range(TOPICS)]
    for future in admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1) for t in topics]).values():
        future.result(30)
    leaders = {}
    for _ in range(100):
        metadata = admin.list_topics(timeout=20).topics
        leaders = {t: metadata[t].partitions[0].leader for t in topics if t in metadata}
        if len(leaders) == TOPICS and all(leader >= 0 for leader in leaders.values()):
            break
    assert set(leaders.values()) <= set(pulsar_of)
    for topic, leader in leaders.items():
        for broker in brokers:
            # a broker that has not heard of the assignment yet answers itself: asked again, it knows
            wait_for(lambda: _lookup(broker["pulsar"], f"persistent://public/default/{topic}")
                     == f"pulsar://{pulsar_of[leader]}", f"{broker['id']} names the owner of {topic}")
    # every topic is owned by one broker, so asking both means at least one answer points elsewhere
    for broker in brokers:
        client = pulsar.Client(f"pulsar://{broker['pulsar']}", operation_timeout_seconds=30,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
        try:
            for topic in topics:
                consumer = client.subscribe(topic, f"via-{broker['id']}", initial_position=pulsar.InitialPosition.Earliest)
                client.create_producer(topic).send(f"via {broker['id']}".encode())
                got = [m.data() for m in receive_all(consumer, 1 + broker["id"])]
                assert got[-1] == f"via {broker['id']}".encode()
        finally:
            client.close()


def test_a_moved_topics_producers_and_consumers_follow_it_to_the_new_owner(cluster):
    """A graceful move (the admin API's partition owner): the old owner closes the topic's producers
    and consumers, and the clients go on at the new one with nothing lost."""
    brokers = cluster.ready()["brokers"]
    topic = unique("moved")
    service_url = "pulsar://" + ",".join(b["pulsar"] for b in brokers)
    # apart, so that the producer's failures cannot move the consumer's connection: only the close can
    client, consumer_client = (pulsar.Client(service_url, operation_timeout_seconds=60,
                                             logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)) for _ in range(2))
    try:
        consumer = consumer_client.subscribe(topic, "m", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, send_timeout_millis=60_000)
        for i in range(30):
            producer.send(str(i).encode())
        got = [int(m.data()) for m in receive_all(consumer, 30)]
        owner = _lookup(brokers[0]["pulsar"], f"persistent://public/default/{topic}").removeprefix("pulsar://")
        [target] = [b for b in brokers if b["pulsar"] != owner]
        response = httpx.put(f"http://{target['admin']}/api/v1/tenants/public/namespaces/default/topics/{topic}"
                             "/partitions/0/owner", json={"broker": target["id"]}, auth=ADMIN, timeout=30)
        assert response.status_code == 202, response.text
        wait_for(lambda: _lookup(target["pulsar"], f"persistent://public/default/{topic}")
                 == f"pulsar://{target['pulsar']}", "the move")
        for i in range(30, 60):
            producer.send(str(i).encode())
        while len(set(got)) < 60:
            message = consumer.receive(60_000)
            consumer.acknowledge(message)
            got.append(int(message.data()))
    finally:
        client.close()
        consumer_client.close()
    assert set(got) == set(range(60))


def test_a_killed_owners_topic_goes_on_at_the_other_broker_with_nothing_acknowledged_lost(cluster):
    """The last test of the module (it leaves one broker): kill -9 of the broker owning a topic mid-stream."""
    brokers = cluster.ready()["brokers"]
    topic = unique("failover")
    # both brokers in the service URL, as a client of a cluster is set up: lookups go on after the kill
    client = pulsar.Client("pulsar://" + ",".join(b["pulsar"] for b in brokers), operation_timeout_seconds=60,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        consumer = client.subscribe(topic, "f", consumer_type=pulsar.ConsumerType.Failover)
        producer = client.create_producer(topic, producer_name="failover-producer", send_timeout_millis=60_000)
        for i in range(50):
            producer.send(str(i).encode(), partition_key=f"k{i % 3}")
        owner = _lookup(brokers[0]["pulsar"], f"persistent://public/default/{topic}").removeprefix("pulsar://")
        [victim] = [index for index, b in enumerate(brokers) if b["pulsar"] == owner]
        cluster.brokers[victim].signal(signal.SIGKILL)
        acknowledged = []
        for i in range(50, 100):
            producer.send(str(i).encode(), partition_key=f"k{i % 3}")
            acknowledged.append(i)
        got = []
        while len(got) < 100:
            message = consumer.receive(60_000)
            consumer.acknowledge(message)
            got.append(int(message.data()))
    finally:
        client.close()
    # every acknowledged send arrives; each key's messages in order (a redelivery may repeat a run)
    assert set(got) == set(range(100))
    for key in range(3):
        seen = [n for n in got if n % 3 == key]
        firsts = sorted(set(seen), key=seen.index)
        assert firsts == sorted(firsts), f"key {key} out of order: {seen}"

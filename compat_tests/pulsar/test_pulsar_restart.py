"""A gateway restart, even kill -9, loses nothing a Pulsar client was told is stored or acknowledged:
the producer's acknowledged messages are all there, the subscription goes on after its last
acknowledgement, and the client reconnects on its own to the same address."""

from __future__ import annotations

import pulsar

from gateway.cluster.ports import free_port
from compat_tests.pulsar.clients import TIMEOUT_MS, client, nothing_more, unique


def test_kill_9_and_a_restart_keep_acknowledged_sends_and_acks(gateway_launcher):
    port = free_port("127.0.0.1")
    gateway = gateway_launcher.start("--pulsar-port", str(port))
    topic = unique("restart")
    pc = client(gateway)
    try:
        consumer = pc.subscribe(topic, "r", consumer_type=pulsar.ConsumerType.Shared,
                                initial_position=pulsar.InitialPosition.Earliest)
        producer = pc.create_producer(topic, producer_name="restart-producer", batching_enabled=True)
        for i in range(100):
            producer.send_async(str(i).encode(), None)
        producer.flush()
        for _ in range(50):
            message = consumer.receive(TIMEOUT_MS)
            assert int(message.data()) < 50
            consumer.acknowledge(message)
        # the acknowledgements reach the broker before it goes (the client sends them in the background)
        consumer.get_last_message_id()
        gateway.kill()
        gateway = gateway_launcher.start("--pulsar-port", str(port))
        for i in range(100, 110):
            producer.send(str(i).encode())       # the same producer, reconnected
        got = set()
        while True:
            try:
                message = consumer.receive(3000)
            except pulsar.Timeout:
                break
            got.add(int(message.data()))
            consumer.acknowledge(message)
        # what was acknowledged before the kill may come again only where its ack was not yet stored
        assert set(range(50, 110)) <= got
        assert nothing_more(consumer)
    finally:
        pc.close()

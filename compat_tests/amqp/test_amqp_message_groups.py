"""FIFO message groups with pika against a real `gateway serve`: a key-shared queue
(x-subscription-type = key-shared) read by 8 consumers on their own connections that nack at
random, one of which dies holding messages of several groups (its TCP connection cut with no
close handshake, as when its process is killed); and a topic a Kafka producer wrote, read through
a key-shared queue with the record key as the group. Every history is checked by the per-group
order checker (compat_tests/amqp/group_order.py), which is itself shown failing bad histories.
"""

from __future__ import annotations

import random
import socket
import threading
import time
import uuid

import pika
import pytest
from confluent_kafka import Producer

from compat_tests.amqp.group_order import all_acknowledged, group_order_problems

TIMEOUT_S = 30.0
NACK_RATE = 0.2
KEY_SHARED = {"x-subscription-type": "key-shared"}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from compat_tests.conftest import start_gateway
    process = start_gateway(tmp_path_factory.mktemp("message-groups"))
    yield process
    process.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def connect(address) -> pika.BlockingConnection:
    host, port = address
    return pika.BlockingConnection(pika.ConnectionParameters(
        host, port, credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1))


# --- the checker on bad histories -----------------------------------------------------------------

GOOD = [("deliver", 1, "g", 0), ("nack", 1), ("deliver", 2, "g", 0), ("ack", 2),
        ("deliver", 3, "g", 1), ("lost", 3), ("deliver", 4, "g", 1), ("ack", 4)]


@pytest.mark.parametrize("history, problem", [
    (GOOD, None),
    # the later message before the nacked one came back
    ([("deliver", 1, "g", 0), ("nack", 1), ("deliver", 2, "g", 1), ("ack", 2)], "got 1, expected 0"),
    # two of one group out at once
    ([("deliver", 1, "g", 0), ("deliver", 2, "g", 1), ("ack", 1), ("ack", 2)], "already has"),
    # acknowledged twice
    (GOOD + [("ack", 4)], "not outstanding"),
    # a message never acknowledged
    (GOOD[:4], "never acknowledged"),
    # skipped a message
    ([("deliver", 1, "g", 1), ("ack", 1)], "got 1, expected 0"),
])
def test_the_group_order_checker_fails_bad_histories(history, problem) -> None:
    problems = group_order_problems({"g": [0, 1]}, history)
    if problem is None:
        assert problems == []
    else:
        assert any(problem in text for text in problems), problems


# --- consumers ------------------------------------------------------------------------------------

class GroupConsumer(threading.Thread):
    """A pika consumer on its own connection, noting every delivery, ack and nack in `history`.
    With `die_holding`, it settles nothing until it holds that many deliveries, then cuts its TCP
    connection."""

    def __init__(self, address, queue: str, history: list, lock: threading.Lock, parse, seed: int, *,
                 prefetch: int = 3, die_holding: int = 0) -> None:
        super().__init__(daemon=True)
        self.address, self.queue, self.history, self.lock, self.parse = address, queue, history, lock, parse
        self.random = random.Random(seed)
        self.prefetch = prefetch
        self.die_holding = die_holding
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.dead = False
        self.error: BaseException | None = None
        self.name = f"consumer-{seed}"

    def note(self, *event) -> None:
        with self.lock:
            self.history.append(event)

    def run(self) -> None:
        connection = connect(self.address)
        try:
            channel = connection.channel()
            channel.basic_qos(prefetch_count=self.prefetch)
            held: list[int] = []

            def on_message(ch, method, properties, body) -> None:
                if self.dead:
                    return          # already read from the socket when it was cut: never seen
                group, seq = self.parse(method, properties, body)
                self.note("deliver", (self.name, method.delivery_tag), group, seq)
                if self.die_holding:
                    held.append(method.delivery_tag)
                    if len(held) == self.die_holding:
                        for tag in held:
                            self.note("lost", (self.name, tag))
                        connection._impl._transport._sock.shutdown(socket.SHUT_RDWR)
                        self.dead = True
                        self.stop.set()
                    return
                if self.random.random() < NACK_RATE:
                    self.note("nack", (self.name, method.delivery_tag))
                    ch.basic_nack(method.delivery_tag, requeue=True)
                else:
                    self.note("ack", (self.name, method.delivery_tag))
                    ch.basic_ack(method.delivery_tag)

            channel.basic_consume(self.queue, on_message)
            self.ready.set()
            while not self.stop.is_set():
                connection.process_data_events(time_limit=0.05)
        except BaseException as exc:
            if not self.dead:
                self.error = exc
        finally:
            self.ready.set()
            if not self.dead:
                connection.close()


def run_consumers(address, queue: str, published: dict, parse, publish, *, count: int, victims: int = 0) -> list:
    """`count` consumers (the first `victims` of them die holding 3 deliveries) consume what
    `publish()` publishes once they are all ready, until every message is acknowledged; returns
    the history."""
    history: list = []
    lock = threading.Lock()
    consumers = [GroupConsumer(address, queue, history, lock, parse, seed, die_holding=3 if seed < victims else 0)
                 for seed in range(count)]
    for consumer in consumers:
        consumer.start()
    for consumer in consumers:
        consumer.ready.wait(TIMEOUT_S)
    try:
        publish()
        deadline = time.monotonic() + TIMEOUT_S
        while not all_acknowledged(published, history) and time.monotonic() < deadline:
            assert not any(c.error for c in consumers), [c.error for c in consumers if c.error]
            time.sleep(0.05)
    finally:
        for consumer in consumers:
            consumer.stop.set()
        for consumer in consumers:
            consumer.join(TIMEOUT_S)
    assert [c.dead for c in consumers[:victims]] == [True] * victims, "a victim never held enough to die"
    assert not any(c.error for c in consumers), [c.error for c in consumers if c.error]
    with lock:
        return list(history)


# --- scenarios ------------------------------------------------------------------------------------

def test_eight_consumers_random_nacks_and_one_killed_keep_every_group_in_order(gateway) -> None:
    queue = unique("groups")
    groups, per_group = 16, 20
    rng = random.Random(7)
    plan = [g for g in range(groups) for _ in range(per_group)]
    rng.shuffle(plan)                               # groups interleaved; within a group, in order
    published: dict[str, list[int]] = {f"g{g}": [] for g in range(groups)}
    for g in plan:
        published[f"g{g}"].append(len(published[f"g{g}"]))
    connection = connect(gateway.amqp)
    connection.channel().queue_declare(queue, durable=True, arguments=KEY_SHARED)

    def publish() -> None:
        try:
            channel = connection.channel()
            channel.confirm_delivery()
            sent = {group: 0 for group in published}
            for g in plan:
                group = f"g{g}"
                header = "x-group-id" if g % 2 else "JMSXGroupID"      # both names, as Artemis clients send
                channel.basic_publish("", queue, f"{group}:{sent[group]}".encode(),
                                      pika.BasicProperties(delivery_mode=2, headers={header: group}))
                sent[group] += 1
        finally:
            connection.close()

    def parse(method, properties, body):
        group, seq = body.decode().split(":")
        assert (properties.headers or {}).get("x-group-id", properties.headers.get("JMSXGroupID")) == group
        return group, int(seq)

    history = run_consumers(gateway.amqp, queue, published, parse, publish, count=8, victims=1)
    assert group_order_problems(published, history) == []
    assert sum(1 for event in history if event[0] == "nack") > 0
    assert sum(1 for event in history if event[0] == "lost") == 3
    consumers_used = {event[1][0] for event in history if event[0] == "deliver"}
    assert len(consumers_used) == 8                 # the groups were spread over every consumer


def test_a_kafka_topic_read_through_a_key_shared_queue_groups_by_record_key(gateway) -> None:
    queue = unique("kafka-groups")
    connection = connect(gateway.amqp)
    try:
        connection.channel().queue_declare(queue, durable=True, arguments=KEY_SHARED)
    finally:
        connection.close()
    host, port = gateway.kafka
    rng = random.Random(11)
    keys = [f"order-{rng.randrange(5)}" for _ in range(60)]
    published: dict[str, list[int]] = {key: list(range(keys.count(key))) for key in set(keys)}

    def publish() -> None:
        producer = Producer({"bootstrap.servers": f"{host}:{port}"})
        sent = {key: 0 for key in published}
        for key in keys:
            producer.produce(queue, value=str(sent[key]).encode(), key=key.encode(), partition=0)
            sent[key] += 1
        assert producer.flush(TIMEOUT_S) == 0

    def parse(method, properties, body):
        return method.routing_key, int(body)       # a Kafka record's key is its routing key

    history = run_consumers(gateway.amqp, queue, published, parse, publish, count=3)
    assert group_order_problems(published, history) == []

"""The clients of the payment-shape benchmark (bench/payments.py): producers that each send one message,
wait for its acknowledgement, and send the next at a fixed rate; one consumer that keeps up.

Kafka: one confluent-kafka Producer per producer (acks=all, idempotent, linger.ms 0), a thread each.
AMQP: one pika BlockingConnection per publisher in confirm mode (basic_publish returns once the broker
confirmed), persistent messages, a thread each. Every message carries its send time, so the consumer
measures end to end; the producer measures send → acknowledgement.

Producers start staggered over one interval (services are not in step) and, when an acknowledgement
takes longer than the interval, send the next at once (a closed loop: each waits for its own ack).
"""

from __future__ import annotations

import struct
import threading
import time
from dataclasses import dataclass, field

import pika
import pika.exceptions
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

STAMP = struct.Struct(">q")
WARM_UP_DEADLINE_S = 60.0


def stamped(size: int) -> bytes:
    """A message of `size` bytes: "T" + its send time (ns) + filler."""
    return b"T" + STAMP.pack(time.perf_counter_ns()) + b"x" * max(size - 1 - STAMP.size, 0)


@dataclass
class Tally:
    """What the producers of one phase saw, gathered from their threads."""
    ack_ns: list[int] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, ack_ns: list[int], failed: list[str]) -> None:
        with self.lock:
            self.ack_ns.extend(ack_ns)
            self.failed.extend(failed)


class Pacer:
    """When producer `index` of `producers` sends its `n`-th message: `rate`/s each, staggered."""

    def __init__(self, start: float, index: int, producers: int, rate: float) -> None:
        self._first = start + index / (producers * rate)
        self._interval = 1.0 / rate

    def wait(self, n: int) -> None:
        pause = self._first + n * self._interval - time.perf_counter()
        if pause > 0:
            time.sleep(pause)


# --- Kafka ---------------------------------------------------------------------------------------


def kafka_producer_config(bootstrap: str) -> dict:
    return {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0}


class KafkaPaymentProducer:
    """One service: connects and warms up on creation; `run` sends `count` messages one at a time."""

    def __init__(self, bootstrap: str, topic: str, partition: int, size: int) -> None:
        self.topic, self.partition, self.size = topic, partition, size
        self._producer = Producer(kafka_producer_config(bootstrap))
        self._producer.produce(topic, b"W" * size, partition=partition)   # producer id, metadata, connections
        if self._producer.flush(WARM_UP_DEADLINE_S):
            raise RuntimeError(f"a warm-up message to {topic} was not acknowledged")

    def run(self, pacer: Pacer, count: int, tally: Tally) -> None:
        ack_ns, failed = [], []
        errors: list = []

        def delivered(err, _msg) -> None:
            if err is not None:
                errors.append(err)

        for n in range(count):
            pacer.wait(n)
            sent = time.perf_counter_ns()
            self._producer.produce(self.topic, stamped(self.size), partition=self.partition, on_delivery=delivered)
            left = self._producer.flush(30)
            if left or errors:
                failed.append(f"{self.topic}[{self.partition}]: {errors.pop() if errors else 'no ack within 30 s'}")
                continue
            ack_ns.append(time.perf_counter_ns() - sent)
        tally.add(ack_ns, failed)


class KafkaFollower:
    """A consumer assigned every partition from the start, noting each stamped message's delay."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "payments-bench",
                                   "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.delays_ns: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="payments-consumer", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        while not self._stop.is_set():
            message = self._consumer.poll(0.05)
            now = time.perf_counter_ns()
            if message is None or message.error() is not None:
                continue
            value = message.value()
            if value and value[:1] == b"T":
                self.delays_ns.append(now - STAMP.unpack_from(value, 1)[0])

    def wait_for(self, count: int, deadline_s: float) -> None:
        end = time.monotonic() + deadline_s
        while len(self.delays_ns) < count and time.monotonic() < end:
            time.sleep(0.01)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


# --- AMQP ----------------------------------------------------------------------------------------


def amqp_parameters(address: str) -> pika.ConnectionParameters:
    host, _, port = address.rpartition(":")
    return pika.ConnectionParameters(host, int(port), credentials=pika.PlainCredentials("guest", "guest"),
                                     connection_attempts=5, retry_delay=1, heartbeat=0)


def declare_queue(address: str, queue: str, queue_type: str, attempts: int = 20) -> None:
    """A durable queue of `queue_type`; a cluster still settling its bundles is asked again."""
    for attempt in range(attempts):
        connection = pika.BlockingConnection(amqp_parameters(address))
        try:
            connection.channel().queue_declare(queue, durable=True, arguments={"x-queue-type": queue_type})
            return
        except pika.exceptions.AMQPError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)
        finally:
            if connection.is_open:
                connection.close()


class AmqpPaymentPublisher:
    """One service on its own connection, in confirm mode: `run` publishes `count` persistent messages,
    each confirmed before the next."""

    def __init__(self, address: str, queue: str, size: int) -> None:
        self.queue, self.size = queue, size
        self._connection = pika.BlockingConnection(amqp_parameters(address))
        self._channel = self._connection.channel()
        self._channel.confirm_delivery()
        self._properties = pika.BasicProperties(delivery_mode=2)
        self._channel.basic_publish("", queue, b"W" * size, self._properties)

    def run(self, pacer: Pacer, count: int, tally: Tally) -> None:
        ack_ns, failed = [], []
        for n in range(count):
            pacer.wait(n)
            sent = time.perf_counter_ns()
            try:
                self._channel.basic_publish("", self.queue, stamped(self.size), self._properties)
            except pika.exceptions.AMQPError as exc:
                failed.append(f"{self.queue}: {exc!r}")
                if not self._channel.is_open:
                    break
                continue
            ack_ns.append(time.perf_counter_ns() - sent)
        tally.add(ack_ns, failed)

    def close(self) -> None:
        if self._connection.is_open:
            self._connection.close()


class AmqpFollower:
    """A consumer on its own connection (prefetch 100, one basic.ack per message), noting each stamped
    message's delay."""

    def __init__(self, address: str, queue: str) -> None:
        self.delays_ns: list[int] = []
        self._address, self._queue = address, queue
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.error: str | None = None
        self._thread = threading.Thread(target=self._follow, name="payments-consumer", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"the consumer of {queue} did not start: {self.error}")

    def _follow(self) -> None:
        connection = None
        try:
            connection = pika.BlockingConnection(amqp_parameters(self._address))
            channel = connection.channel()
            channel.basic_qos(prefetch_count=100)
            channel.basic_consume(self._queue, self._on_message)
            self._ready.set()
            while not self._stop.is_set():
                connection.process_data_events(time_limit=0.05)
        except pika.exceptions.AMQPError as exc:
            self.error = repr(exc)
        finally:
            self._ready.set()
            if connection is not None and connection.is_open:
                connection.close()

    def _on_message(self, channel, deliver, _properties, body: bytes) -> None:
        if body[:1] == b"T":
            self.delays_ns.append(time.perf_counter_ns() - STAMP.unpack_from(body, 1)[0])
        channel.basic_ack(deliver.delivery_tag)

    def wait_for(self, count: int, deadline_s: float) -> None:
        end = time.monotonic() + deadline_s
        while len(self.delays_ns) < count and time.monotonic() < end and self._thread.is_alive():
            time.sleep(0.01)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)

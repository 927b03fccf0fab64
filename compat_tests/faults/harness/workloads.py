"""Client workloads that record into a History while faults happen, then drain what is stored.

`KafkaWorkload(bootstrap, history, topic, partitions)`: confluent-kafka producers (acks=all,
enable.idempotence=true) send unique, sequence-numbered values `<producer>-<seq>` round-robin over
the partitions, each to an explicit partition; consumers read every partition with `assign` from
offset 0. `AmqpWorkload(addresses, history, queue)`: pika publishers with publisher confirms send
persistent messages to a durable queue; consumers take them with manual acks.

Both run in threads for as long as the test says (`start()`, `stop()`), survive the server going
away (librdkafka reconnects by itself; the AMQP threads reconnect, cycling through the addresses),
and end with `drain()`: read everything stored, into the same history, for the checkers.
Addresses are lists, so a cluster is driven the same way as one process.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence

import pika
import pika.exceptions
from pika.adapters.utils.connection_workflow import AMQPConnectorException
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.faults.harness.history import History

log = logging.getLogger("faults.workloads")

# Errors that say the broker did not store the batch; every other delivery error may have stored it.
_DEFINITE_KAFKA_ERRORS = {
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
}
_CLIENT_CONFIG = {
    "socket.timeout.ms": 10_000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    "logger": logging.getLogger("faults.librdkafka"),  # not stderr: a fault makes it chatty
}


class _Threads:
    """Worker threads that run until `stop()`; subclasses provide `_workers()`. `enter`, if set, is
    called first in each worker thread (e.g. NetNamespace.enter: clients connect from inside it)."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.enter: Callable[[], None] | None = None
        self._threads: list[threading.Thread] = []

    def start(self) -> "_Threads":
        for name, work in self._workers():
            def target(work=work) -> None:
                if self.enter is not None:
                    self.enter()
                work()
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 120.0) -> None:  # a producer flushes for up to its message timeout
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [thread.name for thread in self._threads if thread.is_alive()]
        assert not alive, f"workload threads still running after {timeout}s: {alive}"

    def _workers(self):
        raise NotImplementedError

    def _pace(self, rate: float, started: float, sent: int) -> None:
        """Sleep so that `sent` sends since `started` keep to `rate` per second."""
        ahead = sent / rate - (time.monotonic() - started)
        if ahead > 0:
            self.stopping.wait(ahead)


# --- Kafka ----------------------------------------------------------------------------------------


class KafkaWorkload(_Threads):
    def __init__(self, bootstrap: Sequence[str], history: History, topic: str | None = None, *,
                 partitions: int = 3, producers: int = 2, consumers: int = 1, rate: float = 200.0,
                 max_in_flight: int = 500, message_timeout_ms: int = 60_000,
                 consumer_config: dict | None = None) -> None:
        """`consumer_config`: more librdkafka settings for the consumers (e.g. client.rack)."""
        super().__init__()
        self.bootstrap = ",".join(bootstrap)
        self.consumer_config = consumer_config or {}
        self.history = history
        self.topic = topic or f"faults-{uuid.uuid4().hex[:8]}"
        self.partitions = partitions
        self.producers, self.consumers = producers, consumers
        self.rate = rate                    # per producer, messages per second
        self.max_in_flight = max_in_flight
        self.message_timeout_ms = message_timeout_ms

    def key(self, partition: int) -> str:
        return f"{self.topic}/{partition}"

    def create_topic(self, timeout: float = 30.0) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(self.topic, self.partitions, 1)], request_timeout=timeout)
        futures[self.topic].result(timeout)

    def _workers(self):
        yield from ((f"kafka-producer-{i}", lambda i=i: self._produce(i)) for i in range(self.producers))
        yield from ((f"kafka-consumer-{i}", lambda i=i: self._consume(f"c{i}")) for i in range(self.consumers))

    # A producer whose idempotence state failed fatally is replaced by a new one (a new producer id,
    # hence a new name in the history: ordering is promised per producer id only).
    def _produce(self, index: int) -> None:
        session = 0
        while not self.stopping.is_set():
            self._produce_session(f"p{index}.{session}")
            session += 1

    def _produce_session(self, name: str) -> None:
        fatal = threading.Event()

        def on_error(error: KafkaError) -> None:
            if error.fatal():
                log.warning("producer %s: fatal %s", name, error)
                fatal.set()

        producer = Producer({
            "bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "message.timeout.ms": self.message_timeout_ms, "error_cb": on_error, **_CLIENT_CONFIG,
        })
        started, seq = time.monotonic(), 0
        while not self.stopping.is_set() and not fatal.is_set():
            partition = seq % self.partitions
            value = f"{name}-{seq}"
            op = self.history.invoke(name, self.key(partition), value)
            try:
                producer.produce(self.topic, value.encode(), partition=partition, on_delivery=self._delivered(op))
            except (BufferError, KafkaException) as exc:  # not queued: definitely not sent
                self.history.fail(op, f"produce: {exc}")
            seq += 1
            producer.poll(0)
            while len(producer) >= self.max_in_flight and not self.stopping.is_set():
                producer.poll(0.05)
            self._pace(self.rate, started, seq)
        # Wait for what is in flight; what stays undelivered remains "invoked" (unknown).
        producer.flush(self.message_timeout_ms / 1000 + 5)

    def _delivered(self, op: int):
        def callback(error: KafkaError | None, message) -> None:
            if error is None:
                self.history.ok(op, message.offset())
            elif error.code() in _DEFINITE_KAFKA_ERRORS:
                self.history.fail(op, str(error))
            else:
                self.history.info(op, str(error))
        return callback

    def _consumer(self) -> Consumer:
        return Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": f"faults-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", **_CLIENT_CONFIG, **self.consumer_config,
        })

    def _consume(self, name: str) -> None:
        consumer = self._consumer()
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
        try:
            while not self.stopping.is_set():
                for message in consumer.consume(500, 0.2):
                    self._record(name, message)
        finally:
            consumer.close()

    def _record(self, reader: str, message) -> None:
        if message.error() is None:
            self.history.read(reader, self.key(message.partition()), message.offset(), message.value().decode())
        elif message.error().code() != KafkaError._PARTITION_EOF:
            log.info("consumer %s: %s", reader, message.error())

    def end_offsets(self, timeout: float) -> dict[int, int]:
        """The high watermark of every partition, retried until the server answers."""
        consumer = self._consumer()
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    return {p: consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=5)[1]
                            for p in range(self.partitions)}
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        finally:
            consumer.close()

    def drain(self, timeout: float = 60.0) -> dict[int, int]:
        """Read every partition from offset 0 to its end offset as of now (after the faults healed)
        into the history as reader "drain"; returns those end offsets."""
        ends = self.end_offsets(timeout)
        consumer = self._consumer()
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
        positions = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + timeout
        try:
            while any(positions[p] < ends[p] for p in ends):
                assert time.monotonic() < deadline, f"drain stuck at {positions} of {ends}"
                for message in consumer.consume(1000, 0.5):
                    self._record("drain", message)
                    if message.error() is None:
                        positions[message.partition()] = message.offset() + 1
        finally:
            consumer.close()
        return ends


# --- AMQP -----------------------------------------------------------------------------------------


class AmqpWorkload(_Threads):
    def __init__(self, addresses: Sequence[tuple[str, int]], history: History, queue: str | None = None, *,
                 publishers: int = 2, consumers: int = 1, rate: float = 100.0) -> None:
        super().__init__()
        self.addresses = list(addresses)
        self.history = history
        self.queue = queue or f"faults-{uuid.uuid4().hex[:8]}"
        self.publishers, self.consumers = publishers, consumers
        self.rate = rate  # per publisher, messages per second

    def _workers(self):
        yield from ((f"amqp-publisher-{i}", lambda i=i: self._publish(f"a{i}")) for i in range(self.publishers))
        yield from ((f"amqp-consumer-{i}", lambda i=i: self._consume(f"q{i}")) for i in range(self.consumers))

    def connect(self, attempt: int = 0) -> pika.BlockingConnection:
        host, port = self.addresses[attempt % len(self.addresses)]
        connection = pika.BlockingConnection(pika.ConnectionParameters(
            host, port, credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1,
            socket_timeout=5, blocked_connection_timeout=30, heartbeat=10))
        connection.channel().queue_declare(self.queue, durable=True)
        return connection

    def _connected(self, attempt: int) -> pika.BlockingConnection | None:
        try:
            return self.connect(attempt)
        # ValueError: pika on a reset socket; AMQPConnectorException: e.g. a handshake that timed out
        except (pika.exceptions.AMQPError, AMQPConnectorException, OSError, ValueError):
            self.stopping.wait(0.2)
            return None

    def _publish(self, name: str) -> None:
        started, seq, attempt = time.monotonic(), 0, 0
        persistent = pika.BasicProperties(delivery_mode=2)
        while not self.stopping.is_set():
            connection = self._connected(attempt)
            attempt += 1
            if connection is None:
                continue
            try:
                channel = connection.channel()
                channel.confirm_delivery()
                while not self.stopping.is_set():
                    value = f"{name}-{seq}"
                    seq += 1
                    op = self.history.invoke(name, self.queue, value)
                    try:
                        channel.basic_publish("", self.queue, value.encode(), persistent, mandatory=True)
                    except (pika.exceptions.NackError, pika.exceptions.UnroutableError) as exc:
                        self.history.fail(op, type(exc).__name__)
                    except BaseException as exc:  # the connection died with the publish in flight
                        self.history.info(op, f"{type(exc).__name__}: {exc}")
                        raise
                    else:
                        self.history.ok(op)
                    self._pace(self.rate, started, seq)
            except (pika.exceptions.AMQPError, OSError) as exc:
                log.info("publisher %s reconnects: %r", name, exc)
            finally:
                _close_quietly(connection)

    def _consume(self, name: str) -> None:
        attempt = 0
        while not self.stopping.is_set():
            connection = self._connected(attempt)
            attempt += 1
            if connection is None:
                continue
            try:
                channel = connection.channel()
                channel.basic_qos(prefetch_count=100)
                for method, _, body in channel.consume(self.queue, inactivity_timeout=0.2):
                    if self.stopping.is_set():
                        break
                    if method is not None:
                        self.history.read(name, self.queue, None, body.decode(), method.redelivered)
                        channel.basic_ack(method.delivery_tag)
            except (pika.exceptions.AMQPError, OSError) as exc:
                log.info("consumer %s reconnects: %r", name, exc)
            finally:
                _close_quietly(connection)

    def drain(self, timeout: float = 60.0, quiet_s: float = 2.0) -> int:
        """Take everything left in the queue (after the workload stopped, so nothing is held unacked
        elsewhere) into the history as reader "drain"; returns how many were taken."""
        deadline = time.monotonic() + timeout
        taken, attempt = 0, 0
        while True:
            assert time.monotonic() < deadline, f"AMQP drain did not finish within {timeout}s ({taken} taken)"
            connection = self._connected(attempt)
            attempt += 1
            if connection is None:
                continue
            try:
                channel = connection.channel()
                channel.basic_qos(prefetch_count=500)
                for method, _, body in channel.consume(self.queue, inactivity_timeout=quiet_s):
                    if method is None:
                        break
                    self.history.read("drain", self.queue, None, body.decode(), method.redelivered)
                    channel.basic_ack(method.delivery_tag)
                    taken += 1
                channel.cancel()
                if channel.queue_declare(self.queue, durable=True, passive=True).method.message_count == 0:
                    return taken
            except (pika.exceptions.AMQPError, OSError) as exc:
                log.info("drain reconnects: %r", exc)
            finally:
                _close_quietly(connection)


def _close_quietly(connection: pika.BlockingConnection | None) -> None:
    if connection is not None:
        try:
            connection.close()
        except Exception:  # already gone with the server
            pass

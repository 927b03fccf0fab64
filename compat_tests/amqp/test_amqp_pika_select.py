"""pika's asynchronous SelectConnection (callbacks on an I/O loop, the style of pika's own
asynchronous publisher and consumer examples) against a real `gateway serve` process: connect,
declare, publish in confirm mode, consume with acks, a channel closed by a 404 while the connection
lives on, connection closes from either side."""

from __future__ import annotations

from collections.abc import Callable

import pika
import pika.exceptions
import pytest

from compat_tests.amqp.clients import unique

TIMEOUT_S = 20.0
MESSAGES = 200


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from compat_tests.conftest import start_gateway
    process = start_gateway(tmp_path_factory.mktemp("amqp-pika-select"))
    yield process
    process.stop()


class Scenario:
    """A SelectConnection and its I/O loop; `steps` is what happened, in order."""

    def __init__(self, gateway, on_open: Callable[["Scenario"], None]) -> None:
        host, port = gateway.amqp
        self.steps: list[str] = []
        self.failure: BaseException | None = None
        self.close_reason: BaseException | None = None
        self._on_open = on_open
        self.connection = pika.SelectConnection(
            pika.ConnectionParameters(host, port, credentials=pika.PlainCredentials("guest", "guest"),
                                      connection_attempts=1),
            on_open_callback=self._opened, on_open_error_callback=self._open_failed,
            on_close_callback=self._closed)

    def run(self) -> None:
        """Run the loop until the connection is closed (or the time is up, then fail)."""
        timer = self.connection.ioloop.call_later(TIMEOUT_S, self._timed_out)
        self.connection.ioloop.start()
        self.connection.ioloop.remove_timeout(timer)
        if self.failure is not None:
            raise self.failure

    def step(self, name: str) -> None:
        self.steps.append(name)

    def guarded(self, callback: Callable) -> Callable:
        """A callback whose exceptions end the run and fail the test (pika would only log them)."""
        def run(*args, **kwargs):
            try:
                return callback(*args, **kwargs)
            except BaseException as exc:   # noqa: BLE001 - reported by run()
                self.failure = exc
                self.connection.ioloop.stop()
        return run

    def _opened(self, _connection) -> None:
        self.step("connection open")
        self.guarded(self._on_open)(self)

    def _open_failed(self, _connection, error) -> None:
        self.failure = AssertionError(f"connection failed: {error!r}")
        self.connection.ioloop.stop()

    def _closed(self, _connection, reason) -> None:
        self.step("connection closed")
        self.close_reason = reason
        self.connection.ioloop.stop()

    def _timed_out(self) -> None:
        self.failure = AssertionError(f"timed out after {TIMEOUT_S}s; steps so far: {self.steps}")
        self.connection.ioloop.stop()


def test_declare_publish_with_confirms_consume_with_acks_and_close(gateway) -> None:
    queue = unique("select")
    confirmed: set[int] = set()
    nacked: list[int] = []
    received: list[bytes] = []
    published = {"count": 0}

    def on_open(scenario: Scenario) -> None:
        scenario.connection.channel(on_open_callback=scenario.guarded(on_channel))

    def on_channel(channel) -> None:
        scenario.step("channel open")
        channel.queue_declare(queue, durable=True, callback=scenario.guarded(lambda frame: on_declared(channel, frame)))

    def on_declared(channel, frame) -> None:
        assert isinstance(frame.method, pika.spec.Queue.DeclareOk) and frame.method.queue == queue
        scenario.step("queue declared")
        channel.confirm_delivery(scenario.guarded(lambda frame: on_confirm(channel, frame)),
                                 callback=scenario.guarded(lambda _frame: publish_all(channel)))

    def publish_all(channel) -> None:
        scenario.step("confirm mode")
        for i in range(MESSAGES):
            channel.basic_publish("", queue, b"message-%d" % i, pika.BasicProperties(delivery_mode=2))
            published["count"] += 1

    def on_confirm(channel, frame) -> None:
        method = frame.method
        tags = range(1, method.delivery_tag + 1) if method.multiple else [method.delivery_tag]
        if isinstance(method, pika.spec.Basic.Nack):
            nacked.extend(tags)
            return
        assert isinstance(method, pika.spec.Basic.Ack)
        confirmed.update(tags)
        if len(confirmed) == MESSAGES:
            scenario.step("all confirmed")
            channel.basic_qos(prefetch_count=20, callback=scenario.guarded(lambda _frame: start_consuming(channel)))

    def start_consuming(channel) -> None:
        channel.basic_consume(queue, scenario.guarded(on_message),
                              callback=scenario.guarded(lambda _frame: scenario.step("consuming")))

    def on_message(channel, deliver, properties, body) -> None:
        assert properties.delivery_mode == 2 and not deliver.redelivered
        received.append(body)
        channel.basic_ack(deliver.delivery_tag)
        if len(received) == MESSAGES:
            scenario.step("all consumed")
            channel.queue_declare(queue, passive=True, callback=scenario.guarded(
                lambda frame: drained(frame)))

    def drained(frame) -> None:
        assert frame.method.message_count == 0, "every message acknowledged"
        scenario.step("queue empty")
        scenario.connection.close()

    scenario = Scenario(gateway, on_open)
    scenario.run()
    assert scenario.steps == ["connection open", "channel open", "queue declared", "confirm mode", "all confirmed",
                              "consuming", "all consumed", "queue empty", "connection closed"]
    assert confirmed == set(range(1, MESSAGES + 1)) and not nacked
    assert received == [b"message-%d" % i for i in range(MESSAGES)]
    assert isinstance(scenario.close_reason, pika.exceptions.ConnectionClosedByClient)


def test_a_404_closes_the_channel_and_the_connection_carries_on(gateway) -> None:
    closed_with: list[tuple[int, str]] = []

    def on_open(scenario: Scenario) -> None:
        scenario.connection.channel(on_open_callback=scenario.guarded(doomed_channel))

    def doomed_channel(channel) -> None:
        channel.add_on_close_callback(scenario.guarded(on_channel_closed))
        channel.queue_declare("no-such-queue", passive=True,
                              callback=scenario.guarded(lambda _frame: scenario.step("declare-ok?!")))

    def on_channel_closed(_channel, reason) -> None:
        assert isinstance(reason, pika.exceptions.ChannelClosedByBroker)
        closed_with.append((reason.reply_code, reason.reply_text))
        scenario.step("channel closed by broker")
        scenario.connection.channel(on_open_callback=scenario.guarded(second_channel))

    def second_channel(channel) -> None:
        channel.queue_declare("", exclusive=True, callback=scenario.guarded(lambda frame: declared(frame)))

    def declared(frame) -> None:
        assert frame.method.queue.startswith("amq.gen-")
        scenario.step("new channel works")
        scenario.connection.close()

    scenario = Scenario(gateway, on_open)
    scenario.run()
    assert closed_with == [(404, "NOT_FOUND - no queue 'no-such-queue' in vhost '/'")]
    assert scenario.steps == ["connection open", "channel closed by broker", "new channel works", "connection closed"]


def test_nack_with_requeue_redelivers_to_the_consumer(gateway) -> None:
    queue = unique("select-requeue")
    deliveries: list[tuple[bytes, bool]] = []

    def on_open(scenario: Scenario) -> None:
        scenario.connection.channel(on_open_callback=scenario.guarded(on_channel))

    def on_channel(channel) -> None:
        channel.queue_declare(queue, callback=scenario.guarded(lambda _frame: publish(channel)))

    def publish(channel) -> None:
        channel.basic_publish("", queue, b"again")
        channel.basic_consume(queue, scenario.guarded(on_message))

    def on_message(channel, deliver, _properties, body) -> None:
        deliveries.append((body, deliver.redelivered))
        if len(deliveries) == 1:
            channel.basic_nack(deliver.delivery_tag, requeue=True)
        else:
            channel.basic_ack(deliver.delivery_tag)
            scenario.connection.close()

    scenario = Scenario(gateway, on_open)
    scenario.run()
    assert deliveries == [(b"again", False), (b"again", True)]


def test_a_connection_error_reaches_the_close_callback(gateway) -> None:
    def on_open(scenario: Scenario) -> None:
        scenario.connection.channel(on_open_callback=scenario.guarded(
            lambda channel: channel.exchange_declare(unique("odd"), exchange_type="x-no-such-type")))

    scenario = Scenario(gateway, on_open)
    scenario.run()
    assert isinstance(scenario.close_reason, pika.exceptions.ConnectionClosedByBroker)
    assert scenario.close_reason.reply_code == 503
    assert "x-no-such-type" in scenario.close_reason.reply_text

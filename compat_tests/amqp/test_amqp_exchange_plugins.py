"""pika and aio-pika against a real `gateway serve` process: the exchange types of RabbitMQ's
rabbitmq_delayed_message_exchange and rabbitmq_consistent_hash_exchange plugins."""

from __future__ import annotations

import collections
import time
import uuid

import aio_pika
import pika
import pika.exceptions
import pytest

from compat_tests.amqp.clients import unique


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from compat_tests.conftest import start_gateway
    process = start_gateway(tmp_path_factory.mktemp("amqp-exchange-plugins"))
    yield process
    process.stop()


def params(address) -> pika.ConnectionParameters:
    host, port = address
    return pika.ConnectionParameters(host, port, credentials=pika.PlainCredentials("guest", "guest"),
                                     connection_attempts=1)


@pytest.fixture
def channel(gateway):
    connection = pika.BlockingConnection(params(gateway.amqp))
    yield connection.channel()
    if connection.is_open:
        connection.close()


def delayed_exchange(channel, delayed_type: str = "direct", *, durable: bool = False) -> str:
    name = unique("delayed")
    channel.exchange_declare(name, "x-delayed-message", durable=durable, arguments={"x-delayed-type": delayed_type})
    return name


def bound_queue(channel, exchange: str, key: str) -> str:
    queue = channel.queue_declare(unique("q")).method.queue
    channel.queue_bind(queue, exchange, key)
    return queue


def publish_delayed(channel, exchange: str, key: str, body: bytes, delay_ms, *, mandatory: bool = False) -> None:
    headers = None if delay_ms is None else {"x-delay": delay_ms}
    channel.basic_publish(exchange, key, body, pika.BasicProperties(headers=headers), mandatory=mandatory)


def timed_drain(channel, queue: str, count: int, timeout: float = 15.0) -> list[tuple[bytes, float, dict]]:
    """(body, arrival time, headers) of `count` deliveries, acknowledged."""
    got = []
    for method, properties, body in channel.consume(queue, inactivity_timeout=timeout):
        if method is None:
            break
        got.append((body, time.monotonic(), properties.headers or {}))
        channel.basic_ack(method.delivery_tag)
        if len(got) == count:
            break
    channel.cancel()
    return got


# --- x-delayed-message ------------------------------------------------------------------------------

def test_delayed_messages_arrive_after_their_delay_in_due_order(channel) -> None:
    exchange = delayed_exchange(channel)
    queue = bound_queue(channel, exchange, "jobs")
    channel.confirm_delivery()
    sent = time.monotonic()
    for body, delay in ((b"c", 1500), (b"a", 500), (b"now", None), (b"b", 1000), (b"negative", -300),
                        (b"zero", 0)):
        publish_delayed(channel, exchange, "jobs", body, delay)
    got = timed_drain(channel, queue, 6)
    assert [body for body, _, _ in got] == [b"now", b"negative", b"zero", b"a", b"b", b"c"]
    arrived = {body: at - sent for body, at, _ in got}
    assert arrived[b"now"] < 0.5
    assert 0.5 <= arrived[b"a"] < 3.0 and 1.0 <= arrived[b"b"] and 1.5 <= arrived[b"c"]
    headers = {body: hdrs for body, _, hdrs in got}
    assert headers[b"a"]["x-delay"] == -500          # as the plugin marks a message it delayed
    assert headers[b"negative"]["x-delay"] == -300   # routed at once, untouched


def test_a_delayed_topic_exchange_routes_by_pattern_when_due(channel) -> None:
    exchange = delayed_exchange(channel, "topic")
    europe = bound_queue(channel, exchange, "orders.eu.*")
    everything = bound_queue(channel, exchange, "orders.#")
    for key in ("orders.eu.paris", "orders.us.nyc", "invoices.eu.paris"):
        publish_delayed(channel, exchange, key, key.encode(), 300)
    assert channel.queue_declare(everything, passive=True).method.message_count == 0
    assert [body for body, _, _ in timed_drain(channel, europe, 1)] == [b"orders.eu.paris"]
    assert sorted(body for body, _, _ in timed_drain(channel, everything, 2)) == [b"orders.eu.paris",
                                                                              b"orders.us.nyc"]
    assert channel.queue_declare(europe, passive=True).method.message_count == 0


def test_a_delayed_headers_exchange_matches_the_headers_when_due(channel) -> None:
    exchange = delayed_exchange(channel, "headers")
    queue = channel.queue_declare(unique("q")).method.queue
    channel.queue_bind(queue, exchange, arguments={"x-match": "all", "region": "eu"})
    for region in ("us", "eu"):
        channel.basic_publish(exchange, "", region.encode(),
                              pika.BasicProperties(headers={"region": region, "x-delay": 300}))
    (body, _, headers), = timed_drain(channel, queue, 1)
    assert body == b"eu" and headers == {"region": "eu", "x-delay": -300}
    time.sleep(0.5)
    assert channel.queue_declare(queue, passive=True).method.message_count == 0


def test_a_delayed_string_delay_is_honoured_and_confirms_come_when_held(channel) -> None:
    exchange = delayed_exchange(channel, "fanout")
    queue = bound_queue(channel, exchange, "")
    channel.confirm_delivery()
    sent = time.monotonic()
    publish_delayed(channel, exchange, "", b"text-delay", "700")     # confirmed (held) before it is due
    assert time.monotonic() - sent < 0.5
    (body, at, _), = timed_drain(channel, queue, 1)
    assert body == b"text-delay" and at - sent >= 0.7


def test_mandatory_delayed_publish_is_returned_yet_delivered_as_with_the_plugin(channel) -> None:
    exchange = delayed_exchange(channel)
    queue = bound_queue(channel, exchange, "k")
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        publish_delayed(channel, exchange, "k", b"returned-but-kept", 200, mandatory=True)
    assert [body for body, _, _ in timed_drain(channel, queue, 1)] == [b"returned-but-kept"]
    publish_delayed(channel, exchange, "k", b"undelayed", None, mandatory=True)   # routed now: no return
    assert [body for body, _, _ in timed_drain(channel, queue, 1)] == [b"undelayed"]


def test_delayed_exchange_declaration_errors(gateway) -> None:
    connection = pika.BlockingConnection(params(gateway.amqp))
    try:
        channel = connection.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
            channel.exchange_declare(unique("d"), "x-delayed-message")
        assert missing.value.reply_code == 406
        assert missing.value.reply_text == ("PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be "
                                            "an existing exchange type")
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as unknown:
            connection.channel().exchange_declare(unique("d"), "x-delayed-message",
                                                  arguments={"x-delayed-type": "x-nope"})
        assert unknown.value.reply_code == 503
        assert unknown.value.reply_text == "COMMAND_INVALID - unknown exchange type 'x-nope'"
    finally:
        if connection.is_open:
            connection.close()


def test_confirmed_delayed_messages_survive_a_crash_and_come_due_after_the_restart(gateway_launcher, tmp_path) -> None:
    data = tmp_path / "restart-data"
    first = gateway_launcher.start(data_dir=data)
    connection = pika.BlockingConnection(params(first.amqp))
    channel = connection.channel()
    exchange = delayed_exchange(channel, durable=True)
    queue = channel.queue_declare("after-restart", durable=True).method.queue
    channel.queue_bind(queue, exchange, "k")
    channel.confirm_delivery()
    sent_wall = time.time()
    delays = [2500 + (index * 37) % 1500 for index in range(20)]
    for index, delay in enumerate(delays):
        publish_delayed(channel, exchange, "k", str(index).encode(), delay)    # each confirmed: durably held
    assert channel.queue_declare(queue, passive=True).method.message_count == 0
    first.kill()       # no orderly shutdown: what was confirmed must be on disk

    second = gateway_launcher.start(data_dir=data)
    connection = pika.BlockingConnection(params(second.amqp))
    got = timed_drain(connection.channel(), queue, 20, timeout=20)
    connection.close()
    assert len(got) == 20
    order = sorted(range(20), key=lambda index: (delays[index], index))
    assert [body for body, _, _ in got] == [str(index).encode() for index in order]
    assert time.time() - sent_wall >= max(delays) / 1000


# --- x-consistent-hash ------------------------------------------------------------------------------

def test_consistent_hash_spreads_by_weight_and_keeps_a_key_on_one_queue(channel) -> None:
    exchange = unique("hash")
    channel.exchange_declare(exchange, "x-consistent-hash")
    weights = {bound_queue(channel, exchange, str(weight)): weight for weight in (1, 2, 3)}
    channel.confirm_delivery()
    for n in range(3000):
        channel.basic_publish(exchange, f"customer-{n}", b"x")
    counts = {queue: channel.queue_declare(queue, passive=True).method.message_count for queue in weights}
    assert sum(counts.values()) == 3000               # each message in exactly one queue
    # A share varies by ~6% for weight 1 (the ring of random queue names ~4.5%, the 3,000 keys ~4%):
    # 25% is four standard deviations, and still tells weight 1 from 2 from 3.
    for queue, weight in weights.items():
        assert abs(counts[queue] - 3000 * weight / 6) < 0.25 * 3000 * weight / 6
    for queue in weights:
        channel.queue_purge(queue)
    for _ in range(5):
        channel.basic_publish(exchange, "customer-42", b"same")
    counts = [channel.queue_declare(queue, passive=True).method.message_count for queue in weights]
    assert sorted(counts) == [0, 0, 5]


def test_consistent_hash_on_a_header(channel) -> None:
    exchange = unique("hash-header")
    channel.exchange_declare(exchange, "x-consistent-hash", arguments={"hash-header": "customer"})
    queues = [bound_queue(channel, exchange, "1") for _ in range(3)]
    channel.confirm_delivery()
    for n in range(300):
        for _ in range(2):    # the same header twice, whatever the routing key: the same queue
            channel.basic_publish(exchange, uuid.uuid4().hex, str(n).encode(),
                                  pika.BasicProperties(headers={"customer": f"c{n}"}))
    placed = collections.defaultdict(set)
    for queue in queues:
        for body, _, _ in timed_drain(channel, queue, channel.queue_declare(queue, passive=True).method.message_count):
            placed[body].add(queue)
    assert len(placed) == 300 and all(len(where) == 1 for where in placed.values())
    assert len({next(iter(where)) for where in placed.values()}) == 3


def test_consistent_hash_binding_and_declaration_errors(gateway) -> None:
    connection = pika.BlockingConnection(params(gateway.amqp))
    try:
        channel = connection.channel()
        exchange = unique("hash")
        channel.exchange_declare(exchange, "x-consistent-hash")
        queue = channel.queue_declare(unique("q")).method.queue
        for key, text in (("heavy", 'The binding key must be an integer: <<"heavy">>'),
                          ("0", "The binding key must be greater than 0")):
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
                channel.queue_bind(queue, exchange, key)
            assert (refused.value.reply_code, refused.value.reply_text) == (406, f"PRECONDITION_FAILED - {text}")
            channel = connection.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as both:
            channel.exchange_declare(unique("hash"), "x-consistent-hash",
                                     arguments={"hash-header": "h", "hash-property": "message_id"})
        assert both.value.reply_text == "PRECONDITION_FAILED - hash-header and hash-property are mutually exclusive"
    finally:
        if connection.is_open:
            connection.close()


# --- aio-pika ---------------------------------------------------------------------------------------

def url(address) -> str:
    host, port = address
    return f"amqp://guest:guest@{host}:{port}/"


async def test_aio_pika_delayed_messages_and_hash_property(gateway) -> None:
    connection = await aio_pika.connect(url(gateway.amqp))
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        delayed = await channel.declare_exchange(unique("delayed"), "x-delayed-message",
                                                 arguments={"x-delayed-type": "direct"})
        queue = await channel.declare_queue(unique("q"))
        await queue.bind(delayed, "k")
        sent = time.monotonic()
        for body, delay in ((b"two", 800), (b"one", 400)):
            await delayed.publish(aio_pika.Message(body, headers={"x-delay": delay}), "k")   # confirmed
        got = []
        async with queue.iterator(timeout=10) as messages:
            async for message in messages:
                async with message.process():
                    got.append((message.body, time.monotonic() - sent))
                if len(got) == 2:
                    break
        assert [body for body, _ in got] == [b"one", b"two"]
        assert got[0][1] >= 0.4 and got[1][1] >= 0.8

        hashed = await channel.declare_exchange(unique("hash"), "x-consistent-hash",
                                                arguments={"hash-property": "message_id"})
        queues = [await channel.declare_queue(unique("q")) for _ in range(3)]
        for each in queues:
            await each.bind(hashed, "10")
        for n in range(90):
            await hashed.publish(aio_pika.Message(b"m", message_id=f"id-{n % 30}"), routing_key=uuid.uuid4().hex)
        counts = [(await channel.declare_queue(each.name, passive=True)).declaration_result.message_count
                  for each in queues]
        assert sum(counts) == 90 and all(count % 3 == 0 for count in counts)   # a message id stays together
        assert sum(1 for count in counts if count) >= 2

"""aio-pika (on aiormq) against a real `gateway serve` process: confirms under load, consumers,
acks and requeues, RPC, errors, big bodies and a restart.

The broker-neutral tests (those taking `broker` or `connection`) run against the gateway and against
a private RabbitMQ node (Debian's rabbitmq-server; skipped, saying why, where it is not installed)
with the same expectations."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import uuid

import aio_pika
import aiormq.exceptions
import pytest

from compat_tests.amqp.clients import unique

CONFIG = """
[[users]]
name = "alice"
password = "alice-secret"
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from compat_tests.conftest import start_gateway
    tmp = tmp_path_factory.mktemp("amqp-aio-pika")
    config = tmp / "gateway.toml"
    config.write_text(CONFIG)
    process = start_gateway(tmp, "--config", str(config))
    yield process
    process.stop()


def url(address, user: str = "guest", password: str = "guest", vhost: str = "") -> str:
    host, port = address
    return f"amqp://{user}:{password}@{host}:{port}/{vhost}"


@pytest.fixture
async def connection(broker):
    conn = await aio_pika.connect(url(broker))
    yield conn
    await conn.close()


async def take(queue, count: int, *, timeout: float = 10.0) -> list[aio_pika.abc.AbstractIncomingMessage]:
    """`count` messages from a consumer on `queue`, acknowledged."""
    got = []
    async with asyncio.timeout(timeout):
        async with queue.iterator() as messages:
            async for message in messages:
                await message.ack()
                got.append(message)
                if len(got) == count:
                    break
    return got


async def test_round_trip_with_properties_and_headers(connection) -> None:
    channel = await connection.channel()
    queue = await channel.declare_queue(unique("props"))
    await channel.default_exchange.publish(aio_pika.Message(
        b"payload", content_type="text/plain", headers={"k": "v", "n": 5}, correlation_id="c-1", priority=4,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT, message_id="m-1", app_id="aio"), routing_key=queue.name)
    (message,) = await take(queue, 1)
    assert message.body == b"payload" and message.headers == {"k": "v", "n": 5}
    assert (message.content_type, message.correlation_id, message.priority, message.message_id, message.app_id) == (
        "text/plain", "c-1", 4, "m-1", "aio")
    assert message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT and message.redelivered is False


async def test_five_thousand_confirmed_publishes_are_each_consumed_once(connection) -> None:
    channel = await connection.channel(publisher_confirms=True)
    queue = await channel.declare_queue(unique("load"), durable=True)
    confirms = await asyncio.gather(*(
        channel.default_exchange.publish(aio_pika.Message(b"%d" % i, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                                         routing_key=queue.name)
        for i in range(5000)))
    assert all(isinstance(c, aiormq.spec.Basic.Ack) for c in confirms)
    declared = await channel.declare_queue(queue.name, passive=True)
    assert declared.declaration_result.message_count == 5000
    await channel.set_qos(prefetch_count=200)
    bodies = [m.body for m in await take(queue, 5000, timeout=60)]
    assert sorted(bodies) == sorted(b"%d" % i for i in range(5000))
    assert bodies == [b"%d" % i for i in range(5000)], "one consumer sees publish order"


async def test_competing_consumers_share_the_work_within_prefetch(gateway) -> None:
    queue_name = unique("work")
    connection = await aio_pika.connect(url(gateway.amqp))
    producer = await connection.channel()
    await producer.declare_queue(queue_name)
    got: dict[int, list[bytes]] = {0: [], 1: []}
    most_unacked = [0, 0]
    total = 100
    acked = [0]
    finished = asyncio.Event()   # every message acknowledged: closing now gives nothing back
    workers = []
    for index in range(2):
        conn = await aio_pika.connect(url(gateway.amqp))
        workers.append(conn)
        channel = await conn.channel()
        await channel.set_qos(prefetch_count=5)
        queue = await channel.get_queue(queue_name)
        unacked: list = []

        async def handle(message, index=index, unacked=unacked):
            unacked.append(message)
            most_unacked[index] = max(most_unacked[index], len(unacked))
            got[index].append(message.body)
            await asyncio.sleep(0.001)
            unacked.remove(message)
            await message.ack()
            acked[0] += 1
            if acked[0] == total:
                finished.set()

        await queue.consume(handle)
    for i in range(total):
        await producer.default_exchange.publish(aio_pika.Message(b"%d" % i), routing_key=queue_name)
    await asyncio.wait_for(finished.wait(), 20)
    for conn in (*workers, connection):
        await conn.close()
    assert sorted(got[0] + got[1]) == sorted(b"%d" % i for i in range(total))
    assert got[0] and got[1] and max(most_unacked) <= 5


async def test_rpc_with_reply_to_and_correlation_id(connection) -> None:
    channel = await connection.channel()
    requests = await channel.declare_queue(unique("rpc"))

    async def serve(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        async with message.process():
            await channel.default_exchange.publish(
                aio_pika.Message(b"pong:" + message.body, correlation_id=message.correlation_id),
                routing_key=message.reply_to)

    await requests.consume(serve)
    replies = await channel.declare_queue("", exclusive=True)
    answers: dict[str, asyncio.Future] = {}

    async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        await message.ack()
        answers[message.correlation_id].set_result(message.body)

    await replies.consume(on_reply)
    loop = asyncio.get_running_loop()
    for i in range(5):
        correlation = str(uuid.uuid4())
        answers[correlation] = loop.create_future()
        await channel.default_exchange.publish(
            aio_pika.Message(b"ping%d" % i, reply_to=replies.name, correlation_id=correlation),
            routing_key=requests.name)
        assert await asyncio.wait_for(answers[correlation], 10) == b"pong:ping%d" % i


DOOMED_CONSUMER = textwrap.dedent("""
    import asyncio, sys, aio_pika
    async def main():
        conn = await aio_pika.connect(sys.argv[1])
        channel = await conn.channel()
        await channel.set_qos(prefetch_count=2)
        queue = await channel.get_queue(sys.argv[2])
        held = []
        async def hold(message):
            held.append(message)
            if len(held) == 2:
                print("holding", flush=True)
        await queue.consume(hold)
        await asyncio.sleep(60)
    asyncio.run(main())
""")


async def test_unacked_messages_of_a_killed_consumer_are_redelivered(broker, connection) -> None:
    channel = await connection.channel()
    queue = await channel.declare_queue(unique("orphans"), durable=True)
    for body in (b"a", b"b", b"c"):
        await channel.default_exchange.publish(aio_pika.Message(body), routing_key=queue.name)
    doomed = await asyncio.create_subprocess_exec(sys.executable, "-c", DOOMED_CONSUMER, url(broker),
                                                  queue.name, stdout=subprocess.PIPE)
    try:
        assert await asyncio.wait_for(doomed.stdout.readline(), 20) == b"holding\n"
    finally:
        doomed.kill()
        await doomed.wait()
    deadline = asyncio.get_running_loop().time() + 10     # until the broker has noticed and requeued
    while (await queue.declare()).message_count < 3 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    got = await take(queue, 3)
    assert [(m.body, m.redelivered) for m in got] == [(b"a", True), (b"b", True), (b"c", False)]


async def test_nack_and_reject_with_requeue_come_back_redelivered(connection) -> None:
    channel = await connection.channel()
    queue = await channel.declare_queue(unique("requeue"))
    for body in (b"x", b"y"):
        await channel.default_exchange.publish(aio_pika.Message(body), routing_key=queue.name)
    first = await queue.get(no_ack=False)
    second = await queue.get(no_ack=False)
    await first.nack(requeue=True)
    await second.reject(requeue=True)
    again = [await queue.get(no_ack=False) for _ in range(2)]
    assert [(m.body, m.redelivered) for m in again] == [(b"x", True), (b"y", True)]
    await again[0].reject(requeue=False)
    await again[1].nack(requeue=False)
    assert await queue.get(no_ack=True, fail=False) is None


async def test_exclusive_queue_goes_away_with_its_connection(broker, connection) -> None:
    owner = await aio_pika.connect(url(broker))
    queue = await (await owner.channel()).declare_queue("", exclusive=True)
    await owner.close()
    channel = await connection.channel()
    with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity, match=r"no queue '.*' in vhost '/'"):
        await channel.declare_queue(queue.name, passive=True)


async def test_wrong_password_is_refused(gateway) -> None:
    with pytest.raises(aiormq.exceptions.ProbableAuthenticationError, match="ACCESS_REFUSED"):
        await aio_pika.connect(url(gateway.amqp, "alice", "not-her-password"))
    conn = await aio_pika.connect(url(gateway.amqp, "alice", "alice-secret"))
    await conn.close()


async def test_five_megabyte_body(connection) -> None:
    channel = await connection.channel()
    queue = await channel.declare_queue(unique("big"))
    body = bytes(range(256)) * (5 * 1024 * 1024 // 256)
    await channel.default_exchange.publish(aio_pika.Message(body), routing_key=queue.name)
    (message,) = await take(queue, 1)
    assert message.body == body


async def test_topic_and_headers_exchanges_route(connection) -> None:
    channel = await connection.channel()
    topic = await channel.declare_exchange(unique("topic"), aio_pika.ExchangeType.TOPIC)
    headers = await channel.declare_exchange(unique("headers"), aio_pika.ExchangeType.HEADERS)
    eu = await channel.declare_queue("", exclusive=True)
    urgent = await channel.declare_queue("", exclusive=True)
    await eu.bind(topic, routing_key="orders.eu.#")
    await urgent.bind(headers, arguments={"x-match": "any", "urgent": True, "level": "high"})
    for key in ("orders.eu.de", "orders.us.ny", "orders.eu"):
        await topic.publish(aio_pika.Message(key.encode()), routing_key=key)
    await headers.publish(aio_pika.Message(b"1", headers={"urgent": True}), routing_key="")
    await headers.publish(aio_pika.Message(b"2", headers={"level": "low"}), routing_key="")
    await headers.publish(aio_pika.Message(b"3", headers={"level": "high"}), routing_key="")
    assert [m.body for m in await take(eu, 2)] == [b"orders.eu.de", b"orders.eu"]
    assert [m.body for m in await take(urgent, 2)] == [b"1", b"3"]


async def test_exchange_to_exchange_binding_routes_through(connection) -> None:
    channel = await connection.channel()
    front = await channel.declare_exchange(unique("front"), aio_pika.ExchangeType.FANOUT)
    back = await channel.declare_exchange(unique("back"), aio_pika.ExchangeType.DIRECT)
    await back.bind(front)
    queue = await channel.declare_queue("", exclusive=True)
    await queue.bind(back, routing_key="k")
    await front.publish(aio_pika.Message(b"through"), routing_key="k")
    assert [m.body for m in await take(queue, 1)] == [b"through"]


async def test_mandatory_unroutable_publish_is_returned(connection) -> None:
    channel = await connection.channel(on_return_raises=True)
    with pytest.raises(aio_pika.exceptions.PublishError):
        await channel.default_exchange.publish(aio_pika.Message(b"nowhere"), routing_key=unique("nobody"),
                                               mandatory=True)
    relaxed = await connection.channel()
    returned = []
    relaxed.return_callbacks.add(lambda _channel, message: returned.append(message))
    await relaxed.default_exchange.publish(aio_pika.Message(b"back"), routing_key=unique("nobody"), mandatory=True)
    assert [m.body for m in returned] == [b"back"]


async def test_deleting_a_queue_cancels_its_consumers(connection) -> None:
    channel = await connection.channel()
    queue = await channel.declare_queue(unique("doomed"))

    async def ignore(message) -> None:
        pass

    tag = await queue.consume(ignore)
    underlay = await channel.get_underlay_channel()
    assert tag in underlay.consumers
    await (await connection.channel()).queue_delete(queue.name)
    async with asyncio.timeout(5):   # aiormq drops a consumer when the server sends basic.cancel
        while tag in underlay.consumers:
            await asyncio.sleep(0.01)


async def test_durable_messages_survive_a_restart(gateway_launcher, tmp_path) -> None:
    data = tmp_path / "aio-restart"
    first = gateway_launcher.start(data_dir=data)
    conn = await aio_pika.connect(url(first.amqp))
    channel = await conn.channel()
    queue = await channel.declare_queue("aio-durable", durable=True)
    await asyncio.gather(*(channel.default_exchange.publish(
        aio_pika.Message(b"%d" % i, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), routing_key=queue.name)
        for i in range(100)))
    await conn.close()
    first.stop()

    second = gateway_launcher.start(data_dir=data)
    conn = await aio_pika.connect(url(second.amqp))
    channel = await conn.channel()
    queue = await channel.declare_queue("aio-durable", durable=True)
    assert [m.body for m in await take(queue, 100)] == [b"%d" % i for i in range(100)]
    await conn.close()

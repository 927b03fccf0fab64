"""pika and aio-pika against a real `gateway serve` process: priority queues with a backlog, single
active consumer failover when the active consumer's process dies, transactions (commit, rollback,
misuse) and connection.blocked / unblocked.

The scenario functions take the broker's address only: the broker-neutral ones run against the
gateway and against a private RabbitMQ node (Debian's rabbitmq-server; skipped, saying why, where it
is not installed) with the same expectations."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import textwrap
import time

import aio_pika
import aio_pika.abc
import pika
import pika.exceptions
import pytest

from compat_tests.amqp.clients import connect, unique


def consume(channel, queue: str, count: int, *, ack: bool = True, timeout: float = 10.0) -> list:
    got = []
    for method, properties, body in channel.consume(queue, inactivity_timeout=timeout):
        if method is None:
            break
        got.append((method, properties, body))
        if ack:
            channel.basic_ack(method.delivery_tag)
        if len(got) == count:
            break
    channel.cancel()
    return got


# --- scenarios -------------------------------------------------------------------------------------

def priority_backlog_order(address) -> list[bytes]:
    """300 messages with random priorities 0..12 published (confirmed) before anyone consumes, to a
    queue with x-max-priority 9; returns the bodies in delivery order."""
    queue = unique("prio")
    connection = connect(address)
    try:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True, arguments={"x-max-priority": 9})
        channel.confirm_delivery()
        rng = random.Random(7)
        for index in range(300):
            level = rng.randrange(13)
            properties = pika.BasicProperties(priority=level, delivery_mode=2) if level else None
            channel.basic_publish("", queue, b"%d:%d" % (level, index), properties)
        channel.basic_qos(prefetch_count=20)
        bodies = [body for _, _, body in consume(channel, queue, 300)]
        channel.queue_delete(queue)
        return bodies
    finally:
        connection.close()


def expected_priority_order(bodies: list[bytes]) -> list[bytes]:
    def key(body: bytes):
        level, index = map(int, body.split(b":"))
        return (-min(level, 9), index)
    return sorted(bodies, key=key)


def tx_misuse(address) -> list[tuple[int, str]]:
    """(reply code, reply text) of: tx.commit and tx.rollback without tx.select, confirm.select on
    a tx channel, tx.select on a confirm channel."""
    outcomes = []
    connection = connect(address)
    try:
        for steps in (("tx_commit",), ("tx_rollback",), ("tx_select", "confirm_delivery"),
                      ("confirm_delivery", "tx_select")):
            channel = connection.channel()
            try:
                for step in steps:
                    getattr(channel, step)()
                outcomes.append((200, "no error"))
            except pika.exceptions.ChannelClosedByBroker as exc:
                outcomes.append((exc.reply_code, exc.reply_text))
    finally:
        connection.close()
    return outcomes


def tx_commit_and_rollback(address) -> dict:
    """A tx channel takes two messages and publishes two; a watcher checks what it sees before
    and after the commit; then an ack and a publish are rolled back."""
    source, target = unique("tx-src"), unique("tx-dst")
    connection, watcher_connection = connect(address), connect(address)
    seen = {}
    try:
        setup = connection.channel()
        for name in (source, target):
            setup.queue_declare(name, durable=True)
        for body in (b"in-1", b"in-2"):
            setup.basic_publish("", source, body)
        time.sleep(0.2)
        watcher = watcher_connection.channel()

        def counts():
            return (watcher.queue_declare(source, passive=True).method.message_count,
                    watcher.queue_declare(target, passive=True).method.message_count)

        tx = connection.channel()
        tx.tx_select()
        got = [tx.basic_get(source) for _ in range(2)]
        for method, _, body in got:
            tx.basic_publish("", target, body.replace(b"in", b"out"))
            tx.basic_ack(method.delivery_tag)
        time.sleep(0.3)
        seen["before_commit"] = counts()
        tx.tx_commit()
        seen["after_commit"] = counts()
        seen["received"] = [body for _, _, body in consume(watcher, target, 2)]
        # Roll back: a publish and the ack of a redelivery.
        setup.basic_publish("", source, b"in-3")
        time.sleep(0.2)
        method, _, _ = tx.basic_get(source)
        tx.basic_publish("", target, b"never")
        tx.basic_ack(method.delivery_tag)
        tx.tx_rollback()
        seen["after_rollback"] = counts()
        tx.basic_ack(method.delivery_tag)        # still unacknowledged after the rollback
        tx.tx_commit()
        seen["after_second_commit"] = counts()
        setup.queue_delete(source)
        setup.queue_delete(target)
    finally:
        connection.close()
        watcher_connection.close()
    return seen


_ACTIVE_CONSUMER = textwrap.dedent("""
    import sys, pika
    host, port, queue = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    connection = pika.BlockingConnection(pika.ConnectionParameters(host, port,
        credentials=pika.PlainCredentials("guest", "guest")))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=3)
    print("consuming", flush=True)
    for method, properties, body in channel.consume(queue):
        print(body.decode(), flush=True)           # never acknowledged: the process is killed
""")


async def sac_failover(address) -> dict:
    """A consumer process is the active one of an x-single-active-consumer queue, an aio-pika
    consumer waits; the active process is killed with unacknowledged messages; returns what each
    got and the consumer counts."""
    host, port = address
    queue_name = unique("sac")
    connection = await aio_pika.connect(host=host, port=port, login="guest", password="guest")
    outcome: dict = {}
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name, durable=True, arguments={"x-single-active-consumer": True})
        active = subprocess.Popen([sys.executable, "-c", _ACTIVE_CONSUMER, host, str(port), queue_name],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert active.stdout.readline().strip() == "consuming"
            await asyncio.sleep(0.5)
            waiting: list[tuple[str, bool]] = []

            async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                waiting.append((message.body.decode(), message.redelivered))

            await queue.consume(on_message)
            declared = await channel.declare_queue(queue_name, passive=True)
            outcome["consumer_count"] = declared.declaration_result.consumer_count
            for index in range(10):
                await channel.default_exchange.publish(aio_pika.Message(b"m%d" % index), routing_key=queue_name)
            outcome["active_got"] = [active.stdout.readline().strip() for _ in range(3)]
            await asyncio.sleep(0.5)
            outcome["waiting_before_kill"] = list(waiting)
        finally:
            active.kill()
            active.wait()
        deadline = time.monotonic() + 10
        while len(waiting) < 10 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        outcome["waiting_got"] = list(waiting)
        await queue.delete(if_unused=False)
    finally:
        await connection.close()
    return outcome


# --- against the gateway, and the same against RabbitMQ ---------------------------------------------

@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from compat_tests.conftest import start_gateway
    process = start_gateway(tmp_path_factory.mktemp("amqp-prio-sac-tx"))
    yield process
    process.stop()


def test_priority_queue_delivers_a_backlog_highest_first(broker) -> None:
    bodies = priority_backlog_order(broker)
    assert len(bodies) == 300
    assert bodies == expected_priority_order(bodies)


def test_priority_argument_out_of_range_is_precondition_failed(broker) -> None:
    connection = connect(broker)
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as failure:
            connection.channel().queue_declare(unique("p"), arguments={"x-max-priority": 256})
        assert failure.value.reply_code == 406
        assert "invalid arg 'x-max-priority'" in failure.value.reply_text
        assert "{max_value_exceeded,256}" in failure.value.reply_text
    finally:
        connection.close()


async def test_single_active_consumer_fails_over_in_order_when_its_process_dies(broker) -> None:
    outcome = await sac_failover(broker)
    assert outcome["consumer_count"] == 2
    assert outcome["active_got"] == ["m0", "m1", "m2"]
    assert outcome["waiting_before_kill"] == []
    assert outcome["waiting_got"] == [("m%d" % i, i < 3) for i in range(10)]


def test_tx_misuse_is_refused_as_rabbitmq_does(broker) -> None:
    assert tx_misuse(broker) == [
        (406, "PRECONDITION_FAILED - channel is not transactional"),
        (406, "PRECONDITION_FAILED - channel is not transactional"),
        (406, "PRECONDITION_FAILED - cannot switch from tx to confirm mode"),
        (406, "PRECONDITION_FAILED - cannot switch from confirm to tx mode"),
    ]


def test_tx_commit_makes_publishes_and_acks_visible_together(broker) -> None:
    seen = tx_commit_and_rollback(broker)
    assert seen["before_commit"] == (0, 0)        # the gets took both; nothing published yet
    assert seen["after_commit"] == (0, 2)
    assert seen["received"] == [b"out-1", b"out-2"]
    assert seen["after_rollback"] == (0, 0)       # "in-3" is unacknowledged on the tx channel
    assert seen["after_second_commit"] == (0, 0)


async def test_aio_pika_transaction_rollback_drops_publishes(gateway) -> None:
    host, port = gateway.amqp
    connection = await aio_pika.connect(host=host, port=port, login="guest", password="guest")
    try:
        channel = await connection.channel(publisher_confirms=False)
        queue = await channel.declare_queue(unique("aio-tx"))
        transaction = channel.transaction()
        await transaction.select()
        await channel.default_exchange.publish(aio_pika.Message(b"dropped"), routing_key=queue.name)
        await transaction.rollback()
        await channel.default_exchange.publish(aio_pika.Message(b"kept"), routing_key=queue.name)
        await transaction.commit()
        message = await queue.get(timeout=5)
        assert message.body == b"kept"
        await message.ack()
        assert await queue.get(fail=False) is None
    finally:
        await connection.close()


def test_a_publish_backlog_over_its_limit_blocks_and_unblocks_the_connection(gateway) -> None:
    # 70 MiB in one message is above a queue's 64 MiB backlog limit until it is durable.
    connection = connect(gateway.amqp, blocked_connection_timeout=60)
    events: list[str] = []
    connection.add_on_connection_blocked_callback(lambda _conn, frame: events.append(f"blocked:{frame.method.reason}"))
    connection.add_on_connection_unblocked_callback(lambda _conn, frame: events.append("unblocked"))
    try:
        channel = connection.channel()
        queue = unique("big")
        channel.queue_declare(queue)
        channel.confirm_delivery()
        channel.basic_publish("", queue, b"x" * (70 << 20), pika.BasicProperties(delivery_mode=2))
        deadline = time.monotonic() + 30
        while "unblocked" not in events and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.2)
        assert len(events) == 2 and events[0].startswith("blocked:") and "backlog" in events[0]
        assert events[1] == "unblocked"
        channel.queue_delete(queue)
    finally:
        connection.close()


def test_consumers_of_higher_priority_are_served_first_while_they_have_room(broker) -> None:
    queue = unique("cprio")
    connection = connect(broker)
    try:
        channel = connection.channel()
        channel.queue_declare(queue)
        channel.basic_qos(prefetch_count=3)
        got: dict[str, list[bytes]] = {"high": [], "low": []}
        channel.basic_consume(queue, lambda ch, m, p, body: got["low"].append(body), arguments={"x-priority": -1})
        channel.basic_consume(queue, lambda ch, m, p, body: got["high"].append(body), arguments={"x-priority": 5})
        channel.confirm_delivery()
        for i in range(5):
            channel.basic_publish("", queue, b"%d" % i)
        deadline = time.monotonic() + 10
        while len(got["high"]) + len(got["low"]) < 5 and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.1)
        # Nothing is acknowledged: the high-priority consumer takes its prefetch, the low one the rest.
        assert (got["high"], got["low"]) == ([b"0", b"1", b"2"], [b"3", b"4"])
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            connection.channel().basic_consume(queue, lambda *a: None, arguments={"x-priority": "high"})
        assert refused.value.reply_code == 406
        assert refused.value.reply_text == (f"PRECONDITION_FAILED - invalid arg 'x-priority' for queue '{queue}' "
                                            "in vhost '/': \"expected integer, got longstr\"")
    finally:
        if connection.is_open:
            connection.close()

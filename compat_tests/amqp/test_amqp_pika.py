"""pika (BlockingConnection) against a real `gateway serve` process: queues, exchanges, consumers,
acks, confirms, errors and a restart, as a RabbitMQ client sees them.

The broker-neutral tests (those taking `broker` or `connection`) run against the gateway and against
a private RabbitMQ node (Debian's rabbitmq-server; skipped, saying why, where it is not installed)
with the same expectations: reply codes, texts, counts and order as RabbitMQ has them."""

from __future__ import annotations

import threading
import time
import uuid

import pika
import pika.exceptions
import pytest

from compat_tests.amqp.clients import unique

CONFIG = """
[[users]]
name = "alice"
password = "alice-secret"
tenant = "acme"
namespace = "orders"
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from compat_tests.conftest import start_gateway
    tmp = tmp_path_factory.mktemp("amqp-pika")
    config = tmp / "gateway.toml"
    config.write_text(CONFIG)
    process = start_gateway(tmp, "--config", str(config))
    yield process
    process.stop()


def params(address, **options) -> pika.ConnectionParameters:
    host, port = address
    options.setdefault("credentials", pika.PlainCredentials("guest", "guest"))
    return pika.ConnectionParameters(host, port, connection_attempts=1, **options)


@pytest.fixture
def connection(broker):
    conn = pika.BlockingConnection(params(broker))
    yield conn
    if conn.is_open:
        conn.close()


def drain(channel, queue: str, count: int, *, ack: bool = True, timeout: float = 10.0) -> list:
    """`count` deliveries of `queue` as (method, properties, body), acknowledged if `ack`."""
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


def test_round_trip_keeps_properties_and_headers(connection) -> None:
    channel = connection.channel()
    queue = unique("props")
    assert channel.queue_declare(queue).method.queue == queue
    properties = pika.BasicProperties(
        content_type="application/json", content_encoding="utf-8", delivery_mode=2, priority=3,
        correlation_id="corr-1", reply_to="replies", expiration="60000", message_id="m-1", timestamp=1_700_000_000,
        type="order.created", app_id="tests", headers={"tenant": "acme", "attempt": 2, "flags": [1, "two"],
                                                        "nested": {"deep": True}})
    channel.basic_publish("", queue, b'{"id": 1}', properties)
    (method, received, body), = drain(channel, queue, 1)
    assert body == b'{"id": 1}'
    assert (method.exchange, method.routing_key, method.redelivered) == ("", queue, False)
    for name in ("content_type", "content_encoding", "delivery_mode", "priority", "correlation_id", "reply_to",
                 "expiration", "message_id", "timestamp", "type", "app_id"):
        assert getattr(received, name) == getattr(properties, name), name
    assert received.headers == {"tenant": "acme", "attempt": 2, "flags": [1, "two"], "nested": {"deep": True}}


def test_declare_ok_counts_messages_and_consumers(connection) -> None:
    channel = connection.channel()
    queue = unique("counts")
    channel.queue_declare(queue)
    channel.confirm_delivery()
    for i in range(3):
        channel.basic_publish("", queue, b"%d" % i)
    ok = channel.queue_declare(queue, passive=True).method
    assert (ok.message_count, ok.consumer_count) == (3, 0)
    got = channel.basic_get(queue, auto_ack=True)
    assert got[0].message_count == 2 and got[2] == b"0"


def test_server_named_queue_gets_an_amq_gen_name(connection) -> None:
    name = connection.channel().queue_declare("", exclusive=True).method.queue
    assert name.startswith("amq.gen-") and len(name) == len("amq.gen-") + 22


def test_work_queue_spreads_messages_over_consumers_within_prefetch(broker) -> None:
    queue = unique("work")
    publisher = pika.BlockingConnection(params(broker))
    publisher.channel().queue_declare(queue, durable=True)
    received: dict[str, list[bytes]] = {"a": [], "b": []}
    max_unacked: dict[str, int] = {"a": 0, "b": 0}
    done = threading.Event()
    total = 60

    def work(name: str) -> None:
        conn = pika.BlockingConnection(params(broker))
        channel = conn.channel()
        channel.basic_qos(prefetch_count=2)
        pending: list[int] = []

        def on_message(ch, method, properties, body):
            pending.append(method.delivery_tag)
            max_unacked[name] = max(max_unacked[name], len(pending))
            received[name].append(body)
            if len(pending) == 2 or sum(map(len, received.values())) >= total:
                for tag in pending:
                    ch.basic_ack(tag)
                pending.clear()

        channel.basic_consume(queue, on_message)
        while not done.is_set():
            conn.process_data_events(time_limit=0.05)
        for tag in pending:   # else closing requeues them, and the other worker may still take them again
            channel.basic_ack(tag)
        conn.close()

    workers = [threading.Thread(target=work, args=(name,)) for name in received]
    for worker in workers:
        worker.start()
    channel = publisher.channel()
    channel.confirm_delivery()
    deadline = time.monotonic() + 5
    while channel.queue_declare(queue, passive=True).method.consumer_count < 2:
        assert time.monotonic() < deadline, "the workers did not start consuming"
        time.sleep(0.02)
    for i in range(total):
        channel.basic_publish("", queue, b"job-%d" % i, pika.BasicProperties(delivery_mode=2))
    deadline = time.monotonic() + 20
    while sum(map(len, received.values())) < total and time.monotonic() < deadline:
        time.sleep(0.02)
    done.set()
    for worker in workers:
        worker.join(10)
    publisher.close()
    everything = sorted(received["a"] + received["b"])
    assert everything == sorted(b"job-%d" % i for i in range(total)), "each job exactly once"
    assert received["a"] and received["b"], "both workers got work"
    assert max(max_unacked.values()) <= 2, "never more unacknowledged than the prefetch"


def test_rpc_with_reply_to_and_correlation_id(broker) -> None:
    server_conn = pika.BlockingConnection(params(broker))
    server = server_conn.channel()
    rpc_queue = unique("rpc")
    server.queue_declare(rpc_queue)

    client_conn = pika.BlockingConnection(params(broker))
    client = client_conn.channel()
    reply_queue = client.queue_declare("", exclusive=True).method.queue
    correlation = str(uuid.uuid4())
    client.basic_publish("", rpc_queue, b"21", pika.BasicProperties(reply_to=reply_queue, correlation_id=correlation))

    (method, request, body), = drain(server, rpc_queue, 1)
    server.basic_publish("", request.reply_to, str(int(body) * 2).encode(),
                         pika.BasicProperties(correlation_id=request.correlation_id))
    (_, reply, answer), = drain(client, reply_queue, 1)
    assert (reply.correlation_id, answer) == (correlation, b"42")
    server_conn.close()
    client_conn.close()


def test_confirms_for_a_thousand_publishes_and_each_consumed_once(connection) -> None:
    channel = connection.channel()
    queue = unique("confirms")
    channel.queue_declare(queue, durable=True)
    channel.confirm_delivery()
    for i in range(1000):
        channel.basic_publish("", queue, b"%d" % i, pika.BasicProperties(delivery_mode=2))   # raises if nacked
    assert channel.queue_declare(queue, passive=True).method.message_count == 1000
    channel.basic_qos(prefetch_count=100)
    bodies = [body for _, _, body in drain(channel, queue, 1000)]
    assert bodies == [b"%d" % i for i in range(1000)]
    assert channel.queue_declare(queue, passive=True).method.message_count == 0


def test_unacked_messages_of_a_dead_connection_are_redelivered(broker, connection) -> None:
    queue = unique("orphans")
    channel = connection.channel()
    channel.queue_declare(queue, durable=True)
    channel.confirm_delivery()
    for i in range(3):
        channel.basic_publish("", queue, b"%d" % i)
    doomed = pika.BlockingConnection(params(broker))
    doomed_channel = doomed.channel()
    doomed_channel.basic_qos(prefetch_count=2)      # so the third is never delivered to it
    taken = drain(doomed_channel, queue, 2, ack=False)
    assert [body for _, _, body in taken] == [b"0", b"1"]
    doomed._impl._transport._sock.close()    # the connection dies without closing anything
    deadline = time.monotonic() + 10          # until the broker has noticed and requeued both
    while channel.queue_declare(queue, passive=True).method.message_count < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    got = drain(channel, queue, 3)
    assert [(body, method.redelivered) for method, _, body in got] == [(b"0", True), (b"1", True), (b"2", False)]


def test_nack_and_reject_with_requeue_redeliver_and_without_drop(connection) -> None:
    channel = connection.channel()
    queue = unique("requeue")
    channel.queue_declare(queue)
    channel.confirm_delivery()
    for body in (b"a", b"b", b"c"):
        channel.basic_publish("", queue, body)
    first = channel.basic_get(queue)
    second = channel.basic_get(queue)
    channel.basic_nack(first[0].delivery_tag, requeue=True)
    channel.basic_reject(second[0].delivery_tag, requeue=True)
    again = [channel.basic_get(queue) for _ in range(3)]
    assert [(m[2], m[0].redelivered) for m in again] == [(b"a", True), (b"b", True), (b"c", False)]
    channel.basic_nack(again[2][0].delivery_tag, multiple=True, requeue=False)    # drops all three
    assert channel.basic_get(queue) == (None, None, None)


def test_ack_of_an_unknown_delivery_tag_closes_the_channel(connection) -> None:
    channel = connection.channel()
    channel.basic_ack(99)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare(unique("after"))
    assert closed.value.reply_code == 406 and "unknown delivery tag 99" in closed.value.reply_text
    assert connection.is_open


def test_exclusive_queue_is_deleted_when_its_connection_closes(broker, connection) -> None:
    owner = pika.BlockingConnection(params(broker))
    queue = owner.channel().queue_declare(unique("mine"), exclusive=True).method.queue
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as locked:
        connection.channel().queue_declare(queue, exclusive=True)
    assert locked.value.reply_code == 405
    owner.close()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
        connection.channel().queue_declare(queue, passive=True)
    assert missing.value.reply_code == 404


def test_passive_declare_of_a_missing_queue_closes_the_channel_with_404(connection) -> None:
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare("does-not-exist", passive=True)
    assert closed.value.reply_code == 404
    assert closed.value.reply_text == "NOT_FOUND - no queue 'does-not-exist' in vhost '/'"
    assert connection.is_open and connection.channel().is_open


def test_inequivalent_redeclare_is_precondition_failed(connection) -> None:
    queue = unique("equiv")
    connection.channel().queue_declare(queue, durable=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        connection.channel().queue_declare(queue, durable=False)
    assert closed.value.reply_code == 406
    assert f"inequivalent arg 'durable' for queue '{queue}' in vhost '/'" in closed.value.reply_text


def test_unknown_exchange_type_closes_the_connection_with_503(gateway) -> None:
    conn = pika.BlockingConnection(params(gateway.amqp))
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        conn.channel().exchange_declare(unique("odd"), exchange_type="x-no-such-type")
    assert closed.value.reply_code == 503


def test_wrong_password_is_access_refused(gateway) -> None:
    with pytest.raises(pika.exceptions.ProbableAuthenticationError, match="ACCESS_REFUSED"):
        pika.BlockingConnection(params(gateway.amqp, credentials=pika.PlainCredentials("alice", "wrong")))


def test_configured_user_opens_the_vhost_of_its_namespace_only(gateway) -> None:
    alice = pika.PlainCredentials("alice", "alice-secret")
    conn = pika.BlockingConnection(params(gateway.amqp, credentials=alice, virtual_host="acme/orders"))
    queue = unique("tenant-q")
    conn.channel().queue_declare(queue)
    conn.close()
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError, match="530.*access to vhost '/' refused"):
        pika.BlockingConnection(params(gateway.amqp, credentials=alice, virtual_host="/"))
    guest = pika.BlockingConnection(params(gateway.amqp))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        guest.channel().queue_declare(queue, passive=True)     # vhost "/" does not see acme/orders
    guest.close()


def test_five_megabyte_bodies_cross_many_frames(connection) -> None:
    channel = connection.channel()
    queue = unique("big")
    channel.queue_declare(queue)
    channel.confirm_delivery()
    bodies = [bytes([i]) * (5 * 1024 * 1024) for i in range(2)]
    for body in bodies:
        channel.basic_publish("", queue, body)
    got = drain(channel, queue, 2)
    assert [body for _, _, body in got] == bodies


def test_topic_exchange_routes_by_pattern(connection) -> None:
    channel = connection.channel()
    exchange = unique("logs")
    channel.exchange_declare(exchange, exchange_type="topic")
    errors = channel.queue_declare("", exclusive=True).method.queue
    everything = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(errors, exchange, routing_key="*.error")
    channel.queue_bind(everything, exchange, routing_key="#")
    channel.confirm_delivery()
    for key in ("app.error", "app.info", "db.error.disk"):
        channel.basic_publish(exchange, key, key.encode())
    assert [m[0].routing_key for m in drain(channel, errors, 1)] == ["app.error"]
    assert [m[2] for m in drain(channel, everything, 3)] == [b"app.error", b"app.info", b"db.error.disk"]
    assert channel.queue_declare(errors, passive=True).method.message_count == 0


def test_headers_exchange_routes_on_all_and_any(connection) -> None:
    channel = connection.channel()
    exchange = unique("by-headers")
    channel.exchange_declare(exchange, exchange_type="headers")
    both = channel.queue_declare("", exclusive=True).method.queue
    either = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(both, exchange, arguments={"x-match": "all", "format": "pdf", "type": "report"})
    channel.queue_bind(either, exchange, arguments={"x-match": "any", "format": "pdf", "type": "report"})
    channel.confirm_delivery()
    channel.basic_publish(exchange, "", b"1", pika.BasicProperties(headers={"format": "pdf", "type": "report"}))
    channel.basic_publish(exchange, "", b"2", pika.BasicProperties(headers={"format": "pdf"}))
    channel.basic_publish(exchange, "", b"3", pika.BasicProperties(headers={"format": "zip"}))
    assert [m[2] for m in drain(channel, both, 1)] == [b"1"]
    assert [m[2] for m in drain(channel, either, 2)] == [b"1", b"2"]


def test_mandatory_unroutable_publish_comes_back_as_basic_return(connection) -> None:
    channel = connection.channel()
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError) as unroutable:
        channel.basic_publish("amq.direct", unique("nobody"), b"lost", mandatory=True)
    (returned,) = unroutable.value.messages
    assert (returned.method.reply_code, returned.method.reply_text, returned.body) == (312, "NO_ROUTE", b"lost")


def test_publish_to_a_missing_exchange_closes_the_channel_with_404(connection) -> None:
    channel = connection.channel()
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.basic_publish(unique("missing"), "k", b"x")
    assert closed.value.reply_code == 404


def test_durable_queue_keeps_persistent_messages_across_a_restart(gateway_launcher, tmp_path) -> None:
    data = tmp_path / "restart-data"
    first = gateway_launcher.start(data_dir=data)
    conn = pika.BlockingConnection(params(first.amqp))
    channel = conn.channel()
    channel.queue_declare("survivor", durable=True)
    channel.queue_declare("transient-q", durable=False)
    channel.confirm_delivery()
    for i in range(5):
        channel.basic_publish("", "survivor", b"%d" % i, pika.BasicProperties(delivery_mode=2))
    drain(channel, "survivor", 2)                 # two consumed and acknowledged before the stop
    conn.close()
    first.stop()

    second = gateway_launcher.start(data_dir=data)
    conn = pika.BlockingConnection(params(second.amqp))
    channel = conn.channel()
    assert channel.queue_declare("survivor", durable=True, passive=True).method.message_count == 3
    assert [body for _, _, body in drain(channel, "survivor", 3)] == [b"2", b"3", b"4"]
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        channel.queue_declare("transient-q", passive=True)
    conn.close()


def test_confirmed_messages_survive_kill_9(gateway_launcher, tmp_path) -> None:
    data = tmp_path / "kill-data"
    first = gateway_launcher.start(data_dir=data)
    conn = pika.BlockingConnection(params(first.amqp))
    channel = conn.channel()
    channel.queue_declare("crash-safe", durable=True)
    channel.confirm_delivery()
    for i in range(50):
        channel.basic_publish("", "crash-safe", b"%d" % i, pika.BasicProperties(delivery_mode=2))
    first.kill()

    second = gateway_launcher.start(data_dir=data)
    conn = pika.BlockingConnection(params(second.amqp))
    channel = conn.channel()
    assert [body for _, _, body in drain(channel, "crash-safe", 50)] == [b"%d" % i for i in range(50)]
    conn.close()


def test_purge_unbind_and_conditional_delete(connection) -> None:
    channel = connection.channel()
    queue = unique("admin")
    channel.queue_declare(queue)
    channel.queue_bind(queue, "amq.direct", routing_key="k")
    channel.confirm_delivery()
    for _ in range(4):
        channel.basic_publish("amq.direct", "k", b"x")
    assert channel.queue_purge(queue).method.message_count == 4
    channel.queue_unbind(queue, "amq.direct", routing_key="k")
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("amq.direct", "k", b"y", mandatory=True)
    channel.basic_publish("", queue, b"z")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as not_empty:
        channel.queue_delete(queue, if_empty=True)
    assert not_empty.value.reply_code == 406 and "not empty" in not_empty.value.reply_text
    assert connection.channel().queue_delete(queue).method.message_count == 1


def test_recover_requeues_everything_unacknowledged_on_the_channel(connection) -> None:
    channel = connection.channel()
    queue = unique("recover")
    channel.queue_declare(queue)
    channel.confirm_delivery()
    for body in (b"1", b"2"):
        channel.basic_publish("", queue, body)
    assert [channel.basic_get(queue)[2] for _ in range(2)] == [b"1", b"2"]
    channel.basic_recover(requeue=True)
    again = [channel.basic_get(queue, auto_ack=True) for _ in range(2)]
    assert [(m[2], m[0].redelivered) for m in again] == [(b"1", True), (b"2", True)]

"""Behaviours the client libraries' own test suites rely on, checked with pika against the gateway
and against a private RabbitMQ node side by side (the `broker` fixture):

- a channel's methods take effect in order: a basic.get, a queue.purge or a queue.delete right
  after a publish (no confirms) sees that publish (RabbitMQ's queue.declare-ok count may lag, and
  another channel may overtake; the gateway's methods wait for the connection's publishes);
- unbinding what is not there (queue, exchange or binding) is unbind-ok, not an error;
- connection.update-secret is answered with update-secret-ok;
- when a confirm and a delivery of the same message are ready together, the delivery is written
  first (seen on the wire through a recording proxy).
"""

from __future__ import annotations

import socket
import struct
import threading

import pika
import pika.exceptions
import pytest

from compat_tests.amqp.clients import unique

BASIC_DELIVER, BASIC_ACK = (60, 60), (60, 80)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from compat_tests.conftest import start_gateway
    process = start_gateway(tmp_path_factory.mktemp("amqp-parity"))
    yield process
    process.stop()


def params(address) -> pika.ConnectionParameters:
    host, port = address
    return pika.ConnectionParameters(host, port, connection_attempts=1,
                                     credentials=pika.PlainCredentials("guest", "guest"))


@pytest.fixture
def connection(broker):
    conn = pika.BlockingConnection(params(broker))
    yield conn
    if conn.is_open:
        conn.close()


# --- methods in order -----------------------------------------------------------------------------

def test_get_right_after_a_publish_sees_it(connection) -> None:
    channel = connection.channel()
    queue = unique("order-get")
    channel.queue_declare(queue, auto_delete=True)
    channel.basic_publish("", queue, b"first")
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert method is not None and body == b"first" and method.message_count == 0


def test_purge_and_delete_right_after_publishes_count_them(connection) -> None:
    channel = connection.channel()
    queue = unique("order-count")
    channel.queue_declare(queue)
    for i in range(4):
        channel.basic_publish("", queue, b"m%d" % i)
    assert channel.queue_purge(queue).method.message_count == 4
    channel.basic_publish("", queue, b"m4")
    assert channel.queue_delete(queue).method.message_count == 1


def test_another_channel_of_the_connection_sees_the_publish_too(gateway) -> None:
    # The gateway's promise only: RabbitMQ orders the methods of one channel, and a get on another
    # channel may overtake a publish there on a loaded node.
    connection = pika.BlockingConnection(params(gateway.amqp))
    publisher, getter = connection.channel(), connection.channel()
    queue = unique("order-other")
    publisher.queue_declare(queue, auto_delete=True)
    publisher.basic_publish("", queue, b"across")
    method, _, body = getter.basic_get(queue, auto_ack=True)
    connection.close()
    assert method is not None and body == b"across"


# --- unbinding what is not there ------------------------------------------------------------------

def test_unbinding_what_is_not_there_is_unbind_ok(connection) -> None:
    channel = connection.channel()
    queue, exchange = unique("unbind-q"), unique("unbind-x")
    channel.queue_declare(queue, auto_delete=True)
    channel.exchange_declare(exchange, "direct")
    channel.queue_unbind(unique("no-such-queue"), "amq.direct", "k")
    channel.queue_unbind(queue, unique("no-such-exchange"), "k")
    channel.queue_unbind(queue, "amq.direct", "never-bound")
    channel.exchange_unbind(unique("no-such-destination"), "amq.direct", "k")
    channel.exchange_unbind(exchange, unique("no-such-source"), "k")
    channel.exchange_unbind(exchange, "amq.direct", "never-bound")
    assert channel.is_open
    channel.queue_bind(queue, exchange, "k")
    channel.queue_unbind(queue, exchange, "k")       # a real binding still goes
    channel.basic_publish(exchange, "k", b"unrouted")
    assert channel.basic_get(queue)[0] is None
    channel.exchange_delete(exchange)


def test_unbinding_from_the_default_exchange_is_still_refused(connection) -> None:
    channel = connection.channel()
    queue = unique("unbind-default")
    channel.queue_declare(queue, auto_delete=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.queue_unbind(queue, "", queue)
    assert (refused.value.reply_code, refused.value.reply_text) == (
        403, "ACCESS_REFUSED - operation not permitted on the default exchange")


# --- connection.update-secret ---------------------------------------------------------------------

def test_update_secret_is_acknowledged_and_the_connection_goes_on(connection) -> None:
    channel = connection.channel()
    connection.update_secret("new_secret", "token refreshed")
    assert connection.is_open and channel.is_open
    queue = unique("after-secret")
    channel.queue_declare(queue, auto_delete=True)
    channel.basic_publish("", queue, b"still here")
    assert channel.basic_get(queue, auto_ack=True)[2] == b"still here"


# --- frame order: the delivery before the confirm -------------------------------------------------

class RecordingProxy:
    """A TCP proxy in front of a broker that notes the (class, method) of every method frame the
    broker sends, in order."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.methods: list[tuple[int, int]] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = self._listener.getsockname()
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except OSError:
            return
        server = socket.create_connection(self.upstream)
        self._sockets += [client, server]
        threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
        threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, record: bool) -> None:
        pending = b""
        try:
            while data := source.recv(65536):
                sink.sendall(data)
                if record:
                    pending = self._note_frames(pending + data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _note_frames(self, data: bytes) -> bytes:
        while len(data) >= 7:
            frame_type, _channel, size = struct.unpack_from(">BHI", data)
            if len(data) < 7 + size + 1:
                break
            if frame_type == 1:
                self.methods.append(struct.unpack_from(">HH", data, 7))
            data = data[7 + size + 1:]
        return data

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()


def test_a_delivery_goes_out_before_the_confirm_of_the_same_message(broker) -> None:
    proxy = RecordingProxy(broker)
    try:
        conn = pika.BlockingConnection(params(proxy.address))
        channel = conn.channel()
        queue = unique("deliver-first")
        channel.queue_declare(queue, auto_delete=True)
        got: list[bytes] = []
        channel.basic_consume(queue, lambda ch, method, props, body: got.append(body), auto_ack=True)
        channel.confirm_delivery()
        for i in range(5):
            channel.basic_publish("", queue, b"m%d" % i, pika.BasicProperties(delivery_mode=2))
        deadline = 50
        while len(got) < 5 and deadline:
            conn.process_data_events(time_limit=0.2)
            deadline -= 1
        conn.close()
    finally:
        proxy.close()
    assert got == [b"m%d" % i for i in range(5)]
    order = [m for m in proxy.methods if m in (BASIC_DELIVER, BASIC_ACK)]
    assert order == [BASIC_DELIVER, BASIC_ACK] * 5, order

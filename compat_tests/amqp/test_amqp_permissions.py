"""Per-vhost configure / write / read permissions, seen by pika against a real `gateway serve`: each
answer is the one RabbitMQ 3.10 gives for the same permissions (checked side by side)."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest

from compat_tests.amqp.clients import unique

CONFIG = r"""
[[users]]
name = "limited"
password = "limited-secret"
[[users.permissions]]
vhost = "/"
configure = '^(cfg.*|amq\.gen.*)$'
write = '^(wr.*|cfg.*|amq\.default)$'
read = '^(rd.*|cfg.*)$'
[[users.permissions]]
vhost = "acme/orders"
configure = ""
write = ""
read = "^public-"

[[users]]
name = "owner"
password = "owner-secret"
tenant = "acme"
namespace = "orders"

[[users]]
name = "billing"
password = "billing-secret"
tenant = "acme"
namespace = "billing"
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from compat_tests.conftest import start_gateway
    tmp = tmp_path_factory.mktemp("amqp-permissions")
    config = tmp / "gateway.toml"
    config.write_text(CONFIG)
    process = start_gateway(tmp, "--config", str(config))
    yield process
    process.stop()


def connect(gateway, user: str = "limited", vhost: str = "/") -> pika.BlockingConnection:
    host, port = gateway.amqp
    credentials = pika.PlainCredentials(user, f"{user}-secret") if user != "guest" else pika.PlainCredentials(
        "guest", "guest")
    return pika.BlockingConnection(pika.ConnectionParameters(host, port, vhost, credentials, connection_attempts=1))


@pytest.fixture
def limited(gateway):
    conn = connect(gateway)
    yield conn
    if conn.is_open:
        conn.close()


@pytest.fixture
def guest(gateway):
    conn = connect(gateway, "guest")
    yield conn
    conn.close()


def refused(conn: pika.BlockingConnection, action) -> str:
    """Run `action(channel)` on a new channel; it must close the channel with 403; returns the text."""
    channel = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        action(channel)
        channel.basic_qos(prefetch_count=0)   # publish is asynchronous: a round trip to see the refusal
    assert closed.value.reply_code == 403, closed.value.reply_text
    assert conn.is_open
    return closed.value.reply_text


def text(kind: str, name: str, vhost: str = "/", user: str = "limited") -> str:
    return f"ACCESS_REFUSED - access to {kind} '{name}' in vhost '{vhost}' refused for user '{user}'"


def test_configure_governs_declare_and_delete(limited) -> None:
    channel = limited.channel()
    queue, exchange = unique("cfgq"), unique("cfgx")
    channel.queue_declare(queue)
    channel.exchange_declare(exchange)
    assert channel.queue_declare("", exclusive=True).method.queue.startswith("amq.gen-")
    assert refused(limited, lambda ch: ch.queue_declare("other")) == text("queue", "other")
    assert refused(limited, lambda ch: ch.exchange_declare("rdx")) == text("exchange", "rdx")
    assert refused(limited, lambda ch: ch.queue_delete("other-missing")) == text("queue", "other-missing")
    assert refused(limited, lambda ch: ch.exchange_delete("rdx-missing")) == text("exchange", "rdx-missing")
    assert refused(limited, lambda ch: ch.exchange_delete("amq.direct")) == (
        "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed")
    channel.queue_declare(queue, passive=True)                 # passive declares need nothing
    channel.exchange_declare("amq.topic", passive=True)
    channel.queue_delete(queue)
    channel.exchange_delete(exchange)


def test_alternate_exchange_needs_read_on_the_exchange_and_write_on_the_alternate(limited) -> None:
    assert refused(limited, lambda ch: ch.exchange_declare(
        "cfg-ae", arguments={"alternate-exchange": "rd-only"})) == text("exchange", "rd-only")
    limited.channel().exchange_declare(unique("cfg-ae"), arguments={"alternate-exchange": "wr-ok"})


def test_write_governs_publish_and_the_default_exchange_is_amq_default(limited) -> None:
    channel = limited.channel()
    queue = unique("cfgq")
    channel.queue_declare(queue)
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"via the default exchange")
    assert channel.queue_declare(queue, passive=True).method.message_count == 1
    assert refused(limited, lambda ch: ch.basic_publish("amq.direct", "k", b"x")) == text("exchange", "amq.direct")
    # a refused name is refused whether or not it exists; a permitted missing one is NOT_FOUND
    assert refused(limited, lambda ch: ch.basic_publish("nope", "k", b"x")) == text("exchange", "nope")
    channel = limited.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
        channel.basic_publish("wr-nope", "k", b"x")
        channel.basic_qos(prefetch_count=0)
    assert missing.value.reply_code == 404


def test_read_governs_consume_get_and_purge(guest, limited) -> None:
    queue = unique("wrq")
    guest.channel().queue_declare(queue)
    assert refused(limited, lambda ch: ch.basic_consume(queue, lambda *a: None)) == text("queue", queue)
    assert refused(limited, lambda ch: ch.basic_get(queue)) == text("queue", queue)
    assert refused(limited, lambda ch: ch.queue_purge(queue)) == text("queue", queue)
    assert refused(limited, lambda ch: ch.basic_consume("zz-missing", lambda *a: None)) == text("queue", "zz-missing")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
        limited.channel().basic_consume("rd-missing", lambda *a: None)
    assert missing.value.reply_code == 404
    readable = unique("rdq")
    guest_channel = guest.channel()
    guest_channel.queue_declare(readable)
    guest_channel.confirm_delivery()
    guest_channel.basic_publish("", readable, b"hello")
    channel = limited.channel()
    assert channel.basic_get(readable, auto_ack=True)[2] == b"hello"
    assert channel.queue_purge(readable).method.message_count == 0


def test_queue_bind_needs_write_on_the_queue_and_read_on_the_exchange(guest, limited) -> None:
    guest_channel = guest.channel()
    for name in ("wrq-bind", "rdq-bind"):
        guest_channel.queue_declare(name)
    for name in ("rdx-bind", "wrx-bind"):
        guest_channel.exchange_declare(name)
    assert refused(limited, lambda ch: ch.queue_bind("rdq-bind", "rdx-bind", "k")) == text("queue", "rdq-bind")
    assert refused(limited, lambda ch: ch.queue_bind("wrq-bind", "wrx-bind", "k")) == text("exchange", "wrx-bind")
    assert refused(limited, lambda ch: ch.queue_unbind("wrq-bind", "wrx-bind", "k")) == text("exchange", "wrx-bind")
    limited.channel().queue_bind("wrq-bind", "rdx-bind", "k")
    limited.channel().queue_unbind("wrq-bind", "rdx-bind", "k")


def test_exchange_bind_needs_write_on_the_destination_and_read_on_the_source(guest, limited) -> None:
    guest_channel = guest.channel()
    for name in ("rdx-e2e", "wrx-e2e"):
        guest_channel.exchange_declare(name)
    # pika: exchange_bind(destination, source)
    assert refused(limited, lambda ch: ch.exchange_bind("rdx-e2e", "wrx-e2e", "k")) == text("exchange", "rdx-e2e")
    limited.channel().exchange_bind("wrx-e2e", "rdx-e2e", "k")
    limited.channel().exchange_unbind("wrx-e2e", "rdx-e2e", "k")


def test_a_second_vhost_has_its_own_patterns(gateway) -> None:
    conn = connect(gateway, "limited", "acme/orders")
    assert refused(conn, lambda ch: ch.queue_declare("public-q")) == text("queue", "public-q", "acme/orders")
    owner = connect(gateway, "owner", "acme/orders")    # no permissions listed: its own namespace fully
    owner_channel = owner.channel()
    owner_channel.queue_declare("public-q")
    owner_channel.confirm_delivery()
    owner_channel.basic_publish("", "public-q", b"for everyone")
    assert conn.channel().basic_get("public-q", auto_ack=True)[2] == b"for everyone"
    assert refused(conn, lambda ch: ch.basic_publish("", "public-q", b"x")) == text(
        "exchange", "amq.default", "acme/orders")
    owner.close()
    conn.close()


def test_a_vhost_without_permissions_is_refused_at_open_with_530(gateway) -> None:
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError,
                       match="530.*access to vhost 'acme/billing' refused for user 'limited'"):
        connect(gateway, "limited", "acme/billing")
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError,
                       match="530.*access to vhost '/' refused for user 'owner'"):
        connect(gateway, "owner", "/")

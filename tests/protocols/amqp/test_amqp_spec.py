"""The spec table has the ids, flags and reply codes of AMQP 0-9-1 as RabbitMQ implements it."""

from __future__ import annotations

import pytest

from protocols.amqp.spec import (
    BASIC_PROPERTIES, METHODS, METHODS_BY_ID, METHODS_BY_NAME, Domain, ReplyCode, method,
)

EXPECTED_IDS = {
    "connection.start": (10, 10), "connection.start-ok": (10, 11), "connection.secure": (10, 20),
    "connection.secure-ok": (10, 21), "connection.tune": (10, 30), "connection.tune-ok": (10, 31),
    "connection.open": (10, 40), "connection.open-ok": (10, 41), "connection.close": (10, 50),
    "connection.close-ok": (10, 51), "connection.blocked": (10, 60), "connection.unblocked": (10, 61),
    "channel.open": (20, 10), "channel.open-ok": (20, 11), "channel.flow": (20, 20), "channel.flow-ok": (20, 21),
    "channel.close": (20, 40), "channel.close-ok": (20, 41),
    "access.request": (30, 10), "access.request-ok": (30, 11),
    "exchange.declare": (40, 10), "exchange.declare-ok": (40, 11), "exchange.delete": (40, 20),
    "exchange.delete-ok": (40, 21), "exchange.bind": (40, 30), "exchange.bind-ok": (40, 31),
    "exchange.unbind": (40, 40), "exchange.unbind-ok": (40, 51),
    "queue.declare": (50, 10), "queue.declare-ok": (50, 11), "queue.bind": (50, 20), "queue.bind-ok": (50, 21),
    "queue.purge": (50, 30), "queue.purge-ok": (50, 31), "queue.delete": (50, 40), "queue.delete-ok": (50, 41),
    "queue.unbind": (50, 50), "queue.unbind-ok": (50, 51),
    "basic.qos": (60, 10), "basic.qos-ok": (60, 11), "basic.consume": (60, 20), "basic.consume-ok": (60, 21),
    "basic.cancel": (60, 30), "basic.cancel-ok": (60, 31), "basic.publish": (60, 40), "basic.return": (60, 50),
    "basic.deliver": (60, 60), "basic.get": (60, 70), "basic.get-ok": (60, 71), "basic.get-empty": (60, 72),
    "basic.ack": (60, 80), "basic.reject": (60, 90), "basic.recover-async": (60, 100), "basic.recover": (60, 110),
    "basic.recover-ok": (60, 111), "basic.nack": (60, 120),
    "confirm.select": (85, 10), "confirm.select-ok": (85, 11),
    "tx.select": (90, 10), "tx.select-ok": (90, 11), "tx.commit": (90, 20), "tx.commit-ok": (90, 21),
    "tx.rollback": (90, 30), "tx.rollback-ok": (90, 31),
}


@pytest.mark.parametrize("name, key", sorted(EXPECTED_IDS.items()))
def test_every_method_has_its_rabbitmq_class_and_method_id(name, key):
    assert method(name).key == key
    assert METHODS_BY_ID[key].name == name


def test_lookup_tables_cover_the_declared_methods_exactly_once():
    assert len(METHODS_BY_NAME) == len(METHODS_BY_ID) == len(METHODS)
    assert set(EXPECTED_IDS) <= set(METHODS_BY_NAME)


def test_only_publish_return_deliver_and_get_ok_carry_content():
    assert {m.name for m in METHODS if m.has_content} == {"basic.publish", "basic.return", "basic.deliver",
                                                           "basic.get-ok"}


def test_synchronous_requests_name_their_replies():
    assert method("basic.get").replies == ("basic.get-ok", "basic.get-empty")
    assert method("exchange.unbind").replies == ("exchange.unbind-ok",)
    assert method("queue.declare").synchronous and not method("basic.publish").synchronous
    assert all(m.replies for m in METHODS if m.synchronous)


def test_fields_are_declared_in_wire_order_with_their_domains():
    fields = [(f.name, f.domain) for f in method("basic.deliver").fields]
    assert fields == [("consumer-tag", Domain.SHORTSTR), ("delivery-tag", Domain.LONGLONG),
                      ("redelivered", Domain.BIT), ("exchange", Domain.SHORTSTR), ("routing-key", Domain.SHORTSTR)]
    assert [f.attr for f in method("basic.nack").fields] == ["delivery_tag", "multiple", "requeue"]


def test_acks_and_cancels_go_both_ways_but_deliveries_only_from_the_server():
    assert method("basic.ack").sent_by_client and method("basic.ack").sent_by_server
    assert method("basic.cancel").sent_by_server
    assert method("basic.deliver").sent_by_server and not method("basic.deliver").sent_by_client
    assert method("basic.publish").sent_by_client and not method("basic.publish").sent_by_server


@pytest.mark.parametrize("code", [311, 312, 313, 403, 404, 405, 406])
def test_soft_reply_codes_close_only_the_channel(code):
    assert ReplyCode(code).is_soft and not ReplyCode(code).is_hard


@pytest.mark.parametrize("code", [320, 402, 501, 502, 503, 504, 505, 506, 530, 540, 541])
def test_hard_reply_codes_close_the_connection(code):
    assert ReplyCode(code).is_hard and not ReplyCode(code).is_soft


def test_reply_success_is_neither_soft_nor_hard():
    assert ReplyCode.REPLY_SUCCESS == 200
    assert not ReplyCode.REPLY_SUCCESS.is_soft and not ReplyCode.REPLY_SUCCESS.is_hard


def test_basic_has_fourteen_properties_in_flag_order():
    assert [p.name for p in BASIC_PROPERTIES] == [
        "content-type", "content-encoding", "headers", "delivery-mode", "priority", "correlation-id", "reply-to",
        "expiration", "message-id", "timestamp", "type", "user-id", "app-id", "cluster-id"]

"""The adapter in-process over raw sockets: transactions (tx.select / commit / rollback and their
misuse) and connection.blocked / unblocked when a queue's publish backlog is over its limit."""

from __future__ import annotations

import asyncio

import pytest
from amqp_client_frames import CLIENT_CAPABILITIES, PROTOCOL_HEADER, method, open_vhost, publish, start_ok, tune_ok
from test_amqp_server import RawClient, serving

from core.queues import publisher
from protocols.amqp.codec.properties import BasicProperties


async def connected(address, capabilities=None) -> RawClient:
    client = await RawClient.connect(address)
    client.send(PROTOCOL_HEADER)
    await client.expect("connection.start")
    client.send(start_ok(capabilities=capabilities))
    await client.expect("connection.tune")
    client.send(tune_ok(heartbeat=0) + open_vhost("/"))
    await client.expect("connection.open-ok")
    client.send(method(1, "channel.open"))
    await client.expect("channel.open-ok")
    return client


async def message_count(client: RawClient, queue: str) -> int:
    client.send(method(1, "queue.declare", queue=queue, passive=True))
    return (await client.expect("queue.declare-ok"))["message_count"]


async def test_commit_stores_held_publishes_and_rollback_drops_them(core) -> None:
    async with serving(core) as address:
        client = await connected(address)
        watcher = await connected(address)
        client.send(method(1, "queue.declare", queue="tx-q") + method(1, "tx.select"))
        await client.expect("queue.declare-ok")
        await client.expect("tx.select-ok")
        client.send(publish(1, b"one", routing_key="tx-q") + publish(1, b"two", routing_key="tx-q"))
        await asyncio.sleep(0.1)
        assert await message_count(watcher, "tx-q") == 0          # nobody sees an uncommitted publish
        client.send(method(1, "tx.commit"))
        await client.expect("tx.commit-ok")
        assert await message_count(watcher, "tx-q") == 2
        client.send(publish(1, b"three", routing_key="tx-q") + method(1, "tx.rollback"))
        await client.expect("tx.rollback-ok")
        client.send(method(1, "tx.commit"))                         # nothing left to commit
        await client.expect("tx.commit-ok")
        assert await message_count(watcher, "tx-q") == 2


async def test_acks_are_held_until_commit_and_rollback_leaves_them_unacknowledged(core) -> None:
    async with serving(core) as address:
        client = await connected(address)
        client.send(method(1, "queue.declare", queue="tx-acks") + publish(1, b"a", routing_key="tx-acks")
                    + publish(1, b"b", routing_key="tx-acks"))
        await client.expect("queue.declare-ok")
        await asyncio.sleep(0.1)
        client.send(method(1, "tx.select") + method(1, "basic.get", queue="tx-acks")
                    + method(1, "basic.get", queue="tx-acks"))
        await client.expect("tx.select-ok")
        first = await client.expect("basic.get-ok")
        await client.next(), await client.next()      # header, body
        second = await client.expect("basic.get-ok")
        await client.next(), await client.next()
        client.send(method(1, "basic.ack", delivery_tag=second["delivery_tag"], multiple=True)
                    + method(1, "tx.rollback"))
        await client.expect("tx.rollback-ok")
        # Both still unacknowledged on the channel: acknowledging them again is fine.
        client.send(method(1, "basic.ack", delivery_tag=first["delivery_tag"]) + method(1, "tx.commit"))
        await client.expect("tx.commit-ok")
        client.send(method(1, "queue.declare", queue="tx-acks", passive=True))
        assert (await client.expect("queue.declare-ok"))["message_count"] == 0
        client.send(method(1, "basic.ack", delivery_tag=second["delivery_tag"]) + method(1, "tx.commit"))
        await client.expect("tx.commit-ok")
        client.send(method(1, "basic.ack", delivery_tag=second["delivery_tag"]))      # settled already
        closed = await client.expect("channel.close")
        assert closed["reply_code"] == 406 and "unknown delivery tag" in closed["reply_text"]


async def test_mandatory_returns_come_at_commit(core) -> None:
    async with serving(core) as address:
        client = await connected(address)
        client.send(method(1, "tx.select") + publish(1, b"lost", routing_key="nowhere", mandatory=True))
        await client.expect("tx.select-ok")
        client.send(method(1, "tx.commit"))
        returned = await client.expect("basic.return")
        assert returned["reply_code"] == 312
        await client.next(), await client.next()
        await client.expect("tx.commit-ok")


@pytest.mark.parametrize("first, second, text", [
    ("tx.select", "confirm.select", "PRECONDITION_FAILED - cannot switch from tx to confirm mode"),
    ("confirm.select", "tx.select", "PRECONDITION_FAILED - cannot switch from confirm to tx mode"),
])
async def test_tx_and_confirm_modes_exclude_each_other(core, first, second, text) -> None:
    async with serving(core) as address:
        client = await connected(address)
        client.send(method(1, first) + method(1, second))
        await client.expect(f"{first}-ok")
        closed = await client.expect("channel.close")
        assert (closed["reply_code"], closed["reply_text"]) == (406, text)


async def test_rollback_on_a_channel_never_selected_is_precondition_failed(core) -> None:
    async with serving(core) as address:
        client = await connected(address)
        client.send(method(1, "tx.rollback"))
        closed = await client.expect("channel.close")
        assert (closed["reply_code"], closed["reply_text"]) == (406, "PRECONDITION_FAILED - channel is not transactional")


async def test_a_publish_backlog_over_its_limit_blocks_the_connection(core, monkeypatch) -> None:
    monkeypatch.setattr(publisher, "MAX_BACKLOG_BYTES", 64 * 1024)
    async with serving(core) as address:
        client = await connected(address, {**CLIENT_CAPABILITIES, "connection.blocked": True})
        quiet = await connected(address)          # without the capability: never told
        client.send(method(1, "queue.declare", queue="big") + method(1, "confirm.select"))
        await client.expect("queue.declare-ok")
        await client.expect("confirm.select-ok")
        client.send(publish(1, b"x" * 200_000, BasicProperties(delivery_mode=2), routing_key="big"))
        blocked = await client.expect("connection.blocked")
        assert "backlog" in blocked["reason"]
        got = {(await client.next())[1], (await client.next())[1]}
        assert got == {"connection.unblocked", "basic.ack"}
        quiet.send(publish(1, b"y" * 200_000, routing_key="big") + method(1, "queue.declare", queue="big",
                                                                          passive=True))
        assert (await quiet.expect("queue.declare-ok"))["message_count"] in (1, 2)

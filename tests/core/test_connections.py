"""The process's client connections: listed, closed by an operator, closed when their user is
deleted (through the metadata store's watch, whoever deleted it), and max_connections."""

import asyncio

from core.auth import UserStore
from core.connections import ClientConnection
from core.policies import NamespacePolicies
from tests.polling import eventually


def connection(protocol: str = "kafka", closed: list | None = None) -> ClientConnection:
    return ClientConnection(protocol, "127.0.0.1:1", lambda reason: closed.append(reason) if closed is not None else None)


async def test_a_deleted_users_connections_close_and_others_stay(core):
    users = UserStore(core.metadata)
    await users.put_user("alice", "a", iterations=16)
    await users.put_user("bob", "b", iterations=16)
    alice_closed, bob_closed = [], []
    alice = core.connections.add(connection("kafka", alice_closed))
    alice_too = core.connections.add(connection("amqp", alice_closed))
    bob = core.connections.add(connection("amqp", bob_closed))
    for conn, user in ((alice, "alice"), (alice_too, "alice"), (bob, "bob")):
        core.connections.logged_in(conn, user, "public", "default")
    assert [c.id for c in core.connections.all()] == [alice.id, alice_too.id, bob.id]

    await users.update("alice", lambda doc: doc.update(tags=["x"]))   # a change that is no deletion
    await asyncio.sleep(0.05)
    assert alice_closed == []
    await users.delete_user("alice")   # as another process would: only the store changes
    await eventually(lambda: len(alice_closed) == 2)
    assert alice_closed == ["user alice was deleted"] * 2 and bob_closed == []


async def test_the_built_in_guests_connections_are_not_watched(core):
    """The loopback guest has no node: a watch on it would close its connections whenever it fires
    after a metadata reconnection. A node of that name made and deleted later leaves them alone."""
    closed = []
    guest = core.connections.add(connection("amqp", closed))
    core.connections.logged_in(guest, "guest", "public", "default", stored=False)
    users = UserStore(core.metadata)
    await users.put_user("guest", "other", iterations=16)
    await users.delete_user("guest")
    await asyncio.sleep(0.05)
    assert closed == []


async def test_an_operator_closes_one_connection(core):
    closed = []
    one = core.connections.add(connection("kafka", closed))
    assert core.connections.close(one.id, "closed by admin") is True
    assert closed == ["closed by admin"]
    core.connections.remove(one)
    assert core.connections.get(one.id) is None
    assert core.connections.close(one.id, "again") is False


async def test_max_connections_of_a_namespace(core):
    await core.tenancy.create_tenant("acme")
    await core.tenancy.create_namespace("acme", "small", NamespacePolicies(max_connections=1))
    first, second = core.connections.add(connection()), core.connections.add(connection())
    assert await core.connections.enter(first, "acme", "small") is True
    assert await core.connections.enter(second, "acme", "small") is False
    assert await core.connections.enter(second, "public", "default") is True   # no limit there
    core.connections.remove(first)
    assert await core.connections.enter(second, "acme", "small") is True


def test_fetched_partitions_count_while_recent():
    client = connection()
    client.fetched("orders", [0, 2])
    assert client.fetching_now("orders") == [0, 2]
    assert client.fetching_now("orders", within_ms=-1) == []
    assert client.to_doc()["fetching"] == {"orders": [0, 2]}

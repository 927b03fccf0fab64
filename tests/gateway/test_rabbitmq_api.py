"""RabbitMQ's management API as plain functions over a real core and AMQP broker (no HTTP): vhost
names, tenancy, the shapes of queues and bindings, publish and get, definitions out and back in."""

import pytest
from fastapi import HTTPException

from core.clock import FakeClock
from core.service import Core
from gateway.admin.api import AdminContext
from gateway.admin.rabbitmq import changes, definitions, messages, queries, shapes
from gateway.admin.rabbitmq.queries import RabbitState
from gateway.admin.rabbitmq.vhosts import SLASH, RawPathSegments, segment, vhost_name
from gateway.admin.security import Caller
from protocols.amqp.server import make_broker
from protocols.amqp.vhosts import vhost_namespace
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage

ADMIN = Caller("root", None)


@pytest.fixture
async def state(tmp_path):
    storage = await EmbeddedStorage.open(tmp_path / "data", StorageConfig())
    core = Core(storage.metadata, storage.logs, FakeClock())
    await core.start()
    broker = make_broker(core)
    core.tenancy.on_namespace_deleted(broker.queues.forget)     # as the gateway wires them
    yield RabbitState(AdminContext(core, amqp=broker), {"amqp": "127.0.0.1:5672"}, str(tmp_path))
    await broker.queues.close()
    await core.close()
    await storage.close()


@pytest.mark.parametrize("tenant, namespace, vhost", [
    ("public", "default", "/"), ("public", "orders", "orders"), ("acme", "payments", "acme/payments")])
def test_vhost_names_are_the_amqp_front_ends(tenant, namespace, vhost):
    assert vhost_name(tenant, namespace) == vhost
    assert vhost_namespace(vhost) == (tenant, namespace)


async def test_an_encoded_slash_stays_inside_its_path_segment():
    seen = {}

    async def app(scope, receive, send):
        seen.update(scope)

    await RawPathSegments(app)({"type": "http", "path": "/api/queues///q", "raw_path": b"/api/queues/%2F/a%20q?x=1"},
                               None, None)
    assert seen["path"] == f"/api/queues/{SLASH}/a q"
    assert segment(seen["path"].split("/")[3]) == "/"


def test_properties_keys_are_rabbitmqs():
    assert shapes.properties_key("", {}) == "~"
    assert shapes.properties_key("a.#", {}) == "a.%23"
    with_arguments = shapes.properties_key("k", {"x-match": "all"})
    assert with_arguments.startswith("k~") and with_arguments != shapes.properties_key("k", {"x-match": "any"})


async def test_declared_objects_are_listed_in_rabbitmqs_shapes(state):
    assert await changes.put_queue(state, ADMIN, "/", "orders", {"arguments": {"x-queue-type": "quorum"}})
    assert not await changes.put_queue(state, ADMIN, "/", "orders", {"arguments": {"x-queue-type": "quorum"}})
    await changes.put_exchange(state, ADMIN, "/", "events", {"type": "topic"})
    await changes.add_binding(state, ADMIN, "/", "events", "q", "orders", {"routing_key": "order.*"})
    assert await messages.publish(state, ADMIN, "/", "events", {"routing_key": "order.new", "payload": "x"})
    assert not await messages.publish(state, ADMIN, "/", "events", {"routing_key": "other", "payload": "x"})
    queue, = await queries.queues_of(state, ADMIN, "/")
    assert (queue["name"], queue["type"], queue["messages_ready"], queue["vhost"]) == ("orders", "quorum", 1, "/")
    assert [(b["source"], b["routing_key"]) for b in await queries.bindings(state, ADMIN)] == \
        [("", "orders"), ("events", "order.*")]
    peeked = await messages.get(state, ADMIN, "/", "orders", {"count": 5, "ackmode": "ack_requeue_true"})
    assert [m["payload"] for m in peeked] == ["x"] and peeked[0]["message_count"] == 0
    taken = await messages.get(state, ADMIN, "/", "orders", {"ackmode": "ack_requeue_false"})
    assert taken[0]["redelivered"] and await messages.get(state, ADMIN, "/", "orders", {}) == []


async def test_a_tenant_admin_sees_and_changes_only_its_tenants_vhosts(state):
    await changes.put_vhost(state, ADMIN, "acme/payments")
    await changes.put_queue(state, ADMIN, "/", "public-queue", {})
    boss = Caller("boss", "acme")
    assert [v["name"] for v in await queries.vhosts(state, boss)] == ["acme/payments"]
    assert await queries.queues_of(state, boss) == []
    for attempt in (queries.queues_of(state, boss, "/"), changes.put_queue(state, boss, "/", "q", {}),
                    changes.put_vhost(state, boss, "other/ns")):
        with pytest.raises(HTTPException) as refused:
            await attempt
        assert refused.value.status_code in (403, 404)


async def test_definitions_go_out_and_come_back(state):
    await changes.put_vhost(state, ADMIN, "shop")
    await changes.put_queue(state, ADMIN, "shop", "invoices", {"arguments": {"x-message-ttl": 1000}})
    await changes.put_exchange(state, ADMIN, "shop", "billing", {"type": "direct"})
    await changes.add_binding(state, ADMIN, "shop", "billing", "q", "invoices", {"routing_key": "pay"})
    exported = await definitions.export(state, ADMIN)
    assert {"name": "shop"} in exported["vhosts"]
    await changes.delete_vhost(state, ADMIN, "shop")
    assert await definitions.import_(state, ADMIN, exported) == []      # nothing skipped
    assert [q["arguments"] for q in await queries.queues_of(state, ADMIN, "shop")] == [{"x-message-ttl": 1000}]
    assert ("billing", "invoices", "pay") in [(b["source"], b["destination"], b["routing_key"])
                                              for b in await queries.bindings(state, ADMIN, "shop")]
    with pytest.raises(HTTPException):
        await definitions.import_(state, ADMIN, {"queues": "everything"})

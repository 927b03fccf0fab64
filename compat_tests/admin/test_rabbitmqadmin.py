"""RabbitMQ's management API on the gateway's admin port, driven by the unmodified `rabbitmqadmin`
(Debian's rabbitmq-server ships it; run in this interpreter, see `admin`): list, declare, delete,
publish, get, export and import, close a connection; and the same commands against a RabbitMQ 3.10
node with the management plugin, whose JSON shapes the gateway's must match (the fields it leaves
out are listed in ABSENT_FIELDS and in docs/OPERATIONS.md)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import shutil
import signal
import sys
import uuid
from pathlib import Path

import httpx
import pika
import pytest

from compat_tests.admin.conftest import ADMIN
from compat_tests.conftest import wait_for

RABBITMQADMIN = shutil.which("rabbitmqadmin") or next(
    (str(p) for p in Path("/usr/lib/rabbitmq/lib").glob("rabbitmq_server-*/plugins/rabbitmq_management-*/priv/www/"
                                                        "cli/rabbitmqadmin")), None)
pytestmark = pytest.mark.skipif(RABBITMQADMIN is None, reason="no rabbitmqadmin (apt-get install rabbitmq-server)")

# Fields RabbitMQ 3.10 shows that the gateway leaves out: Erlang internals (memory, reductions, garbage
# collection, backing queue), paging to disk, per-object message stats it does not keep, policies.
ABSENT_FIELDS = {
    "queues": {"backing_queue_status", "consumer_capacity", "effective_policy_definition", "garbage_collection",
               "head_message_timestamp", "idle_since", "memory", "message_bytes", "message_bytes_paged_out",
               "message_bytes_persistent", "message_bytes_ram", "message_bytes_ready",
               "message_bytes_unacknowledged", "messages_paged_out", "messages_persistent", "messages_ram",
               "messages_ready_ram", "messages_unacknowledged_ram", "operator_policy", "recoverable_slaves",
               "reductions", "reductions_details", "single_active_consumer_tag"},
    "exchanges": {"message_stats"},
    "vhosts": {"message_stats", "recv_oct", "recv_oct_details", "send_oct", "send_oct_details"},
    "bindings": set(), "users": set(), "permissions": set(),
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def admin(port: int, *args: str, user: tuple[str, str] = ADMIN, check: bool = True) -> str:
    """Run rabbitmqadmin, the file as Debian ships it, in this interpreter (as its own `python3` would:
    a process start per call costs more than the calls themselves); its output, and exit status."""
    argv = [RABBITMQADMIN, "-H", "127.0.0.1", "-P", str(port), "-u", user[0], "-p", user[1], *args]
    out, err, code = io.StringIO(), io.StringIO(), 0
    sigpipe = signal.getsignal(signal.SIGPIPE)     # the script resets it for itself
    saved_argv, sys.argv = sys.argv, argv
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(RABBITMQADMIN, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = saved_argv
        signal.signal(signal.SIGPIPE, sigpipe)
    if check and code != 0:
        raise AssertionError(f"rabbitmqadmin {' '.join(args)} exited {code}: {err.getvalue()}{out.getvalue()}")
    return out.getvalue() if check else out.getvalue() + err.getvalue()


def listed(port: int, kind: str, *args: str, user: tuple[str, str] = ADMIN) -> list[dict]:
    return json.loads(admin(port, *args, "-f", "raw_json", "list", kind, user=user))


@pytest.fixture(scope="module")
def port(admin_gateway) -> int:
    return admin_gateway.admin[1]


def test_declare_list_publish_get_and_delete(port):
    queue, exchange = unique("orders"), unique("events")
    admin(port, "declare", "queue", f"name={queue}", "durable=true", 'arguments={"x-max-length": 100}')
    admin(port, "declare", "exchange", f"name={exchange}", "type=topic")
    admin(port, "declare", "binding", f"source={exchange}", f"destination={queue}", "routing_key=order.*")
    queues = {q["name"]: q for q in listed(port, "queues")}
    assert queues[queue]["vhost"] == "/" and queues[queue]["arguments"] == {"x-max-length": 100}
    assert queues[queue]["type"] == "classic" and queues[queue]["messages"] == 0
    assert {"name": exchange, "type": "topic"}.items() <= {e["name"]: e for e in listed(port, "exchanges")}[exchange].items()
    assert "" in {e["name"] for e in listed(port, "exchanges")}    # the default exchange, as RabbitMQ lists it
    bindings = [(b["source"], b["destination"], b["routing_key"]) for b in listed(port, "bindings")]
    assert (exchange, queue, "order.*") in bindings and ("", queue, queue) in bindings
    assert "/" in {v["name"] for v in listed(port, "vhosts")}
    assert {"name": "root", "tags": ["administrator"]}.items() <= {u["name"]: u for u in listed(port, "users")}["root"].items()

    admin(port, "publish", f"exchange={exchange}", "routing_key=order.created", "payload=first",
          'properties={"delivery_mode": 2, "headers": {"source": "test"}}')
    admin(port, "publish", f"exchange={exchange}", "routing_key=nowhere", "payload=lost")
    assert {q["name"]: q for q in listed(port, "queues")}[queue]["messages_ready"] == 1
    peeked, = json.loads(admin(port, "-f", "raw_json", "get", f"queue={queue}"))     # ack_requeue_true
    assert peeked["payload"] == "first" and peeked["routing_key"] == "order.created" and peeked["exchange"] == exchange
    assert peeked["properties"] == {"delivery_mode": 2, "headers": {"source": "test"}} and not peeked["redelivered"]
    taken, = json.loads(admin(port, "-f", "raw_json", "get", f"queue={queue}", "ackmode=ack_requeue_false"))
    assert taken["payload"] == "first" and taken["redelivered"]      # the peek put it back as a redelivery
    assert json.loads(admin(port, "-f", "raw_json", "get", f"queue={queue}")) == []
    assert {q["name"]: q for q in listed(port, "queues")}[queue]["messages"] == 0

    admin(port, "delete", "binding", f"source={exchange}", "destination_type=queue", f"destination={queue}",
          "properties_key=order.*")
    assert (exchange, queue, "order.*") not in [(b["source"], b["destination"], b["routing_key"])
                                                for b in listed(port, "bindings")]
    admin(port, "delete", "queue", f"name={queue}")
    admin(port, "delete", "exchange", f"name={exchange}")
    assert queue not in {q["name"] for q in listed(port, "queues")}
    assert exchange not in {e["name"] for e in listed(port, "exchanges")}


def test_vhosts_users_and_permissions(port, admin_gateway):
    vhost, user = unique("shop"), unique("clerk")
    admin(port, "declare", "vhost", f"name={vhost}")
    admin(port, "declare", "user", f"name={user}", "password=clerk-secret", "tags=")
    admin(port, "declare", "permission", f"vhost={vhost}", f"user={user}", "configure=^$", "write=.*", "read=^in-")
    admin(port, "-V", vhost, "declare", "queue", f"name=in-{vhost}", 'arguments={"x-queue-type": "quorum"}')
    assert {"user": user, "vhost": vhost, "configure": "^$", "write": ".*", "read": "^in-"} in listed(port, "permissions")
    assert [(q["name"], q["type"]) for q in listed(port, "queues", "-V", vhost)] == [(f"in-{vhost}", "quorum")]
    # The new user logs in over AMQP into that vhost and may read the queue the permission names.
    with pika.BlockingConnection(pika.ConnectionParameters(
            *admin_gateway.amqp, virtual_host=vhost, credentials=pika.PlainCredentials(user, "clerk-secret"))) as c:
        c.channel().queue_declare(f"in-{vhost}", passive=True)
    admin(port, "delete", "permission", f"vhost={vhost}", f"user={user}")
    assert not [p for p in listed(port, "permissions") if p["user"] == user]
    admin(port, "delete", "user", f"name={user}")
    admin(port, "delete", "vhost", f"name={vhost}")
    assert vhost not in {v["name"] for v in listed(port, "vhosts")}


def test_export_and_import_definitions(port, tmp_path):
    vhost, queue, exchange = unique("moved"), unique("invoices"), unique("billing")
    admin(port, "declare", "vhost", f"name={vhost}")
    admin(port, "-V", vhost, "declare", "queue", f"name={queue}", 'arguments={"x-message-ttl": 60000}')
    admin(port, "-V", vhost, "declare", "exchange", f"name={exchange}", "type=direct")
    admin(port, "-V", vhost, "declare", "binding", f"source={exchange}", f"destination={queue}", "routing_key=pay")
    exported = tmp_path / "definitions.json"
    admin(port, "-V", vhost, "export", str(exported))
    document = json.loads(exported.read_text())
    assert document["queues"] == [{"name": queue, "durable": True, "auto_delete": False,
                                   "arguments": {"x-message-ttl": 60000}}]
    assert [b["routing_key"] for b in document["bindings"]] == ["pay"]

    admin(port, "delete", "vhost", f"name={vhost}")
    admin(port, "declare", "vhost", f"name={vhost}")
    admin(port, "-V", vhost, "import", str(exported))
    assert [q["arguments"] for q in listed(port, "queues", "-V", vhost)] == [{"x-message-ttl": 60000}]
    assert (exchange, queue, "pay") in [(b["source"], b["destination"], b["routing_key"])
                                        for b in listed(port, "bindings", "-V", vhost)]
    # A RabbitMQ file: its users carry only a password hash, which cannot become SCRAM keys; its
    # policies have no equivalent. Both are named in the answer, the rest is imported.
    rabbit_file = {"users": [{"name": unique("hashed"), "password_hash": "abc", "tags": ""}],
                   "policies": [{"vhost": vhost, "name": "ha", "pattern": ".*", "definition": {"ha-mode": "all"}}],
                   "queues": [{"name": "from-rabbit", "vhost": vhost, "durable": True, "auto_delete": False,
                               "arguments": {}}]}
    answer = httpx.post(f"http://127.0.0.1:{port}/api/definitions", json=rabbit_file, auth=ADMIN, timeout=30)
    assert answer.status_code == 200
    assert sorted(s["kind"] for s in answer.json()["skipped"]) == ["policies", "user"]
    assert "from-rabbit" in {q["name"] for q in listed(port, "queues", "-V", vhost)}
    admin(port, "delete", "vhost", f"name={vhost}")


def test_connections_and_channels_are_listed_and_closed(port, admin_gateway):
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        *admin_gateway.amqp, credentials=pika.PlainCredentials(*ADMIN)))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=7)
    channel.confirm_delivery()
    name = next(c["name"] for c in listed(port, "connections") if c["protocol"] == "AMQP 0-9-1" and c["user"] == "root")
    assert name.endswith(f"-> {admin_gateway.amqp[0]}:{admin_gateway.amqp[1]}")
    channels = [c for c in listed(port, "channels") if c["connection_details"]["name"] == name]
    assert [(c["number"], c["prefetch_count"], c["confirm"]) for c in channels] == [(1, 7, True)]
    admin(port, "close", "connection", f"name={name}")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        for _ in range(100):
            connection.process_data_events(0.1)
    assert closed.value.reply_code == 320
    wait_for(lambda: name not in {c["name"] for c in listed(port, "connections")}, "the connection to go")


def test_tenancy_and_errors_as_rabbitmq_answers_them(port, admin_gateway):
    base = f"http://127.0.0.1:{port}/api"
    api = httpx.Client(base_url=f"{admin_gateway.admin_url}/api/v1", auth=ADMIN, timeout=30)
    tenant, boss = unique("acme"), unique("boss")
    api.put(f"/tenants/{tenant}").raise_for_status()
    api.put(f"/tenants/{tenant}/namespaces/payments").raise_for_status()
    api.put(f"/users/{boss}", json={"password": "boss-secret", "tenant": tenant, "namespace": "payments",
                                    "tags": ["tenant-admin"]}).raise_for_status()
    boss_login = (boss, "boss-secret")
    assert [v["name"] for v in listed(port, "vhosts", user=boss_login)] == [f"{tenant}/payments"]
    assert "Not found" in admin(port, "-V", "/", "list", "queues", user=boss_login, check=False)
    assert httpx.get(f"{base}/queues/%2F", auth=boss_login).status_code == 404     # another tenant's: not there
    admin(port, "-V", f"{tenant}/payments", "declare", "queue", "name=ledger", user=boss_login)
    assert httpx.get(f"{base}/queues/{tenant}%2Fpayments/ledger", auth=boss_login).json()["vhost"] == f"{tenant}/payments"

    assert httpx.put(f"{base}/queues/%2F/ledger", json={}, auth=ADMIN).status_code in (201, 204)
    assert httpx.get(f"{base}/overview").status_code == 401
    assert httpx.get(f"{base}/overview", auth=("plain", "plain-secret")).status_code == 403
    for method, path, body in (("PUT", "/exchanges/%2F/x1", {"type": "nonsense"}),
                               ("PUT", "/queues/%2F/q1", {"durable": "perhaps"}),
                               ("PUT", "/queues/%2F/q2", [1, 2]),
                               ("POST", "/queues/%2F/ledger/get", {"ackmode": "eat_it"}),
                               ("POST", "/exchanges/%2F/amq.default/publish", {"payload": "x", "properties": {"bad": 1}}),
                               ("POST", "/definitions", {"queues": "all of them"})):
        answer = httpx.request(method, base + path, json=body, auth=ADMIN)
        assert answer.status_code == 400 and answer.json()["error"] == "bad_request", (path, answer.text)
    answer = httpx.put(f"{base}/queues/%2F/q3", content=b"{not json", auth=ADMIN,
                       headers={"content-type": "application/json"})
    assert answer.status_code == 400 and answer.json()["reason"]
    assert "Not found" in admin(port, "list", "queues", "-V", "no-such-vhost", check=False)
    assert httpx.put(f"{base}/exchanges/%2F/amq.mine", json={"type": "direct"}, auth=ADMIN).status_code == 403
    assert httpx.get(f"{base}/health/checks/alarms", auth=ADMIN).json() == {"status": "ok"}
    assert httpx.get(f"{base}/aliveness-test/%2F", auth=ADMIN).json() == {"status": "ok"}
    assert httpx.get(f"{admin_gateway.admin_url}/api/v1/tenants", auth=ADMIN).status_code == 200   # /api/v1 untouched


# --- side by side with RabbitMQ -------------------------------------------------------------------
# RabbitMQ's fields (name -> JSON type) are kept in golden/rabbitmq-3.10-shapes.json, captured from a
# private RabbitMQ 3.10.8 node with the management plugin: every run checks the gateway against them.
# `make rabbitmq-api-compare` runs the same commands against such a node and the gateway side by side
# (the node takes half a minute to start) and, with GATEWAY_UPDATE_GOLDEN=1, captures the file again.

GOLDEN = Path(__file__).parent / "golden" / "rabbitmq-3.10-shapes.json"
KINDS = ("queues", "exchanges", "bindings", "vhosts", "users", "permissions", "get", "definitions")
OPTIONAL_FIELDS = {"message_stats"}     # RabbitMQ adds it once its statistics saw traffic (every 5 s)
side_by_side = pytest.mark.skipif(os.environ.get("GATEWAY_RABBITMQ_SIDE_BY_SIDE") != "1",
                                  reason="against a real RabbitMQ node only in `make rabbitmq-api-compare`")


def _json_type(value) -> str:
    return type(value).__name__ if value is not None else "null"


def _same_setup(port: int, user: tuple[str, str], queue: str, exchange: str) -> None:
    admin(port, "declare", "queue", f"name={queue}", 'arguments={"x-max-length": 10}', user=user)
    admin(port, "declare", "exchange", f"name={exchange}", "type=fanout", user=user)
    admin(port, "declare", "binding", f"source={exchange}", f"destination={queue}", "routing_key=k", user=user)
    admin(port, "publish", f"exchange={exchange}", "routing_key=k", "payload=hello", user=user)


def _samples(port: int, user: tuple[str, str], queue: str, exchange: str, tmp_path: Path) -> dict[str, dict]:
    """One object of each kind, as the broker at `port` shows it after _same_setup."""
    picks = {"queues": ("name", queue), "exchanges": ("name", exchange), "bindings": ("destination", queue),
             "vhosts": ("name", "/"), "users": (None, None), "permissions": (None, None)}
    found = {}
    for kind, (key, value) in picks.items():
        found[kind] = next(o for o in listed(port, kind, user=user) if key is None or o[key] == value)
    found["get"] = json.loads(admin(port, "-f", "raw_json", "get", f"queue={queue}", user=user))[0]
    admin(port, "export", str(tmp_path / f"{port}.json"), user=user)
    found["definitions"] = json.loads((tmp_path / f"{port}.json").read_text())
    return found


def _check_fields(kind: str, ours: dict, theirs: dict[str, str]) -> None:
    invented = set(ours) - set(theirs) - OPTIONAL_FIELDS
    assert not invented, f"{kind}: fields RabbitMQ does not have: {sorted(invented)}"
    missing = set(theirs) - set(ours) - ABSENT_FIELDS.get(kind, set()) - OPTIONAL_FIELDS
    assert not missing, f"{kind}: RabbitMQ's fields missing: {sorted(missing)}"
    for field in set(ours) & set(theirs):
        assert "null" in (_json_type(ours[field]), theirs[field]) or _json_type(ours[field]) == theirs[field] \
            or (field == "properties" and kind == "get"), (kind, field, ours[field], theirs[field])


def test_the_shapes_are_rabbitmqs(port, tmp_path):
    golden = json.loads(GOLDEN.read_text())
    queue, exchange = unique("side"), unique("fan")
    _same_setup(port, ADMIN, queue, exchange)
    ours = _samples(port, ADMIN, queue, exchange, tmp_path)
    for kind in KINDS:
        _check_fields(kind, ours[kind], golden[kind])


@side_by_side
def test_side_by_side_with_rabbitmq(port, tmp_path, tmp_path_factory):
    from bench.rabbitmq import RABBIT_BIN, pick_port, start_rabbitmq
    if not (RABBIT_BIN / "rabbitmq-server").exists():
        pytest.skip(f"no rabbitmq-server in {RABBIT_BIN} (apt-get install rabbitmq-server): nothing to compare with")
    amqp_port = pick_port(5960)
    node = start_rabbitmq(tmp_path_factory.mktemp("rabbit-management"), amqp_port, management_port=amqp_port + 1)
    try:
        guest, rabbit = ("guest", "guest"), amqp_port + 1
        queue, exchange = unique("side"), unique("fan")
        _same_setup(port, ADMIN, queue, exchange)
        _same_setup(rabbit, guest, queue, exchange)
        ours = _samples(port, ADMIN, queue, exchange, tmp_path)

        def statistics_in() -> bool:     # RabbitMQ adds a queue's and a vhost's counts every 5 s
            queues = {q["name"]: q for q in listed(rabbit, "queues", user=guest)}
            vhosts = {v["name"]: v for v in listed(rabbit, "vhosts", user=guest)}
            return "messages" in queues.get(queue, {}) and "messages" in vhosts.get("/", {})

        wait_for(statistics_in, "RabbitMQ's statistics", deadline_s=30)
        theirs = _samples(rabbit, guest, queue, exchange, tmp_path)
        captured = {kind: {field: _json_type(value) for field, value in theirs[kind].items()} for kind in KINDS}
        if os.environ.get("GATEWAY_UPDATE_GOLDEN") == "1":
            GOLDEN.parent.mkdir(exist_ok=True)
            GOLDEN.write_text(json.dumps(captured, indent=1, sort_keys=True) + "\n")
        def steady(shapes: dict) -> dict:    # without what RabbitMQ's statistics add a few seconds late
            return {kind: {f: t for f, t in fields.items() if f not in OPTIONAL_FIELDS} for kind, fields in shapes.items()}

        assert steady(captured) == steady(json.loads(GOLDEN.read_text())), "RabbitMQ's shapes changed: capture them again"
        for kind in KINDS:
            _check_fields(kind, ours[kind], captured[kind])
        # The same objects, the same values where they mean the same.
        for kind, fields in (("queues", ("name", "vhost", "durable", "auto_delete", "exclusive", "arguments", "type")),
                             ("exchanges", ("name", "vhost", "type", "durable", "auto_delete", "internal", "arguments")),
                             ("bindings", ("source", "vhost", "destination", "destination_type", "routing_key",
                                           "arguments", "properties_key"))):
            assert [ours[kind][f] for f in fields] == [theirs[kind][f] for f in fields], kind
        assert {k: v for k, v in ours["get"].items() if k != "properties"} == \
            {k: v for k, v in theirs["get"].items() if k != "properties"}
        for section in ("queues", "exchanges", "bindings"):
            assert [e for e in ours["definitions"][section] if queue in json.dumps(e)] == \
                [e for e in theirs["definitions"][section] if queue in json.dumps(e)], section
    finally:
        node.stop()

"""One grant for every protocol, with real clients against a real gateway: a permission written
through the admin API lets its user produce and consume over Kafka (SCRAM, its consumer group
included) and publish and consume over AMQP (PLAIN) with no other step; a change applies to open
connections at once; tenant admins grant only inside their tenant; and the audit log records the
changes and the refusals, repeated refusals as one count per interval.
"""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pika
import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from kafka import KafkaProducer
from kafka.errors import TopicAuthorizationFailedError

TIMEOUT_S = 10
ROOT = ("root", "root-secret")
CONFIG = """
audit_refusal_interval_s = 1

[kafka]
sasl_mechanisms = "PLAIN,SCRAM-SHA-256"

[[users]]
name = "root"
password = "root-secret"
tags = ["administrator"]
"""
EVERYTHING = {"configure": ".*", "write": ".*", "read": ".*"}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from compat_tests.conftest import start_gateway
    tmp = tmp_path_factory.mktemp("authorization-model")
    config = tmp / "gateway.toml"
    config.write_text(CONFIG)
    process = start_gateway(tmp, "--config", str(config))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def api(gateway):
    with httpx.Client(base_url=f"{gateway.admin_url}/api/v1", auth=ROOT, timeout=30) as client:
        yield client


def namespace_with_user(api, user: str, **body) -> str:
    """A fresh tenant with namespace "shop" and `user` in it (no grant unless `body` gives one)."""
    tenant = f"t{uuid.uuid4().hex[:8]}"
    api.put(f"/tenants/{tenant}").raise_for_status()
    api.put(f"/tenants/{tenant}/namespaces/shop").raise_for_status()
    api.put(f"/users/{user}", json={"password": f"{user}-secret", "tenant": tenant, "namespace": "shop",
                                    "permissions": [], **body}).raise_for_status()
    return tenant


def scram(gateway, user: str, **extra) -> dict:
    host, port = gateway.kafka
    return {"bootstrap.servers": f"{host}:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": f"{user}-secret", **extra}


def delivery_error(gateway, user: str, topic: str) -> KafkaError | None:
    delivered: list = []
    producer = Producer(scram(gateway, user, **{"message.timeout.ms": 5000}))
    producer.produce(topic, b"v", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(TIMEOUT_S)
    assert len(delivered) == 1
    return delivered[0]


def group_poll(gateway, user: str, topic: str, group: str, accept):
    consumer = Consumer(scram(gateway, user, **{"group.id": group, "auto.offset.reset": "earliest",
                                                "session.timeout.ms": 6000}))
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 2 * TIMEOUT_S
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and accept(message):
                if message.error() is None:
                    consumer.commit(message, asynchronous=False)
                return message
        return None
    finally:
        consumer.close()


class AmqplainCredentials(pika.PlainCredentials):
    """pika speaks only PLAIN and EXTERNAL: this offers AMQPLAIN, a field table of LOGIN and PASSWORD
    without its length prefix (the AMQP 0-9-1 spec's encoding)."""

    def response_for(self, start):
        if b"AMQPLAIN" not in pika.compat.as_bytes(start.mechanisms).split():
            return None, None

        def entry(name: bytes, value: bytes) -> bytes:
            return bytes([len(name)]) + name + b"S" + len(value).to_bytes(4, "big") + value
        return "AMQPLAIN", entry(b"LOGIN", self.username.encode()) + entry(b"PASSWORD", self.password.encode())


def amqp(gateway, user: str, tenant: str, credentials=pika.PlainCredentials) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        *gateway.amqp, virtual_host=f"{tenant}/shop", credentials=credentials(user, f"{user}-secret"),
        connection_attempts=1))


def test_a_namespace_grant_opens_kafka_and_amqp_alike(gateway, api) -> None:
    tenant = namespace_with_user(api, "pat")
    # Without a grant: refused over both protocols.
    assert delivery_error(gateway, "pat", "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    refused = group_poll(gateway, "pat", "orders", "pat-app", lambda m: m.error() is not None)
    assert refused is not None and refused.error().code() in (KafkaError.GROUP_AUTHORIZATION_FAILED,
                                                              KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        amqp(gateway, "pat", tenant)

    granted = api.put(f"/permissions/{tenant}/shop/pat", json=EVERYTHING)
    assert granted.status_code == 200, granted.text

    assert delivery_error(gateway, "pat", "orders") is None            # auto-created, then written
    message = group_poll(gateway, "pat", "orders", "pat-app", lambda m: m.error() is None)
    assert message is not None and message.value() == b"v"

    for credentials in (pika.PlainCredentials, AmqplainCredentials):
        connection = amqp(gateway, "pat", tenant, credentials)
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("inbox")
        channel.basic_publish("", "inbox", credentials.__name__.encode())
        method, _, body = channel.basic_get("inbox", auto_ack=True)
        assert body == credentials.__name__.encode()
        connection.close()


def test_a_group_needs_read_on_its_name(gateway, api) -> None:
    tenant = namespace_with_user(api, "gus")
    api.put(f"/permissions/{tenant}/shop/gus", json={"configure": ".*", "write": ".*", "read": "^(orders|team-)"})
    assert delivery_error(gateway, "gus", "orders") is None
    refused = group_poll(gateway, "gus", "orders", "other-app", lambda m: m.error() is not None)
    assert refused is not None and refused.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    allowed = group_poll(gateway, "gus", "orders", "team-app", lambda m: m.error() is None)
    assert allowed is not None and allowed.value() == b"v"


def test_a_revoked_write_fails_the_next_produce_and_publish_on_open_connections(gateway, api) -> None:
    tenant = namespace_with_user(api, "rex")
    api.put(f"/permissions/{tenant}/shop/rex", json=EVERYTHING).raise_for_status()
    host, port = gateway.kafka
    producer = KafkaProducer(bootstrap_servers=f"{host}:{port}", security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="rex",
                             sasl_plain_password="rex-secret", retries=0, max_block_ms=TIMEOUT_S * 1000,
                             request_timeout_ms=TIMEOUT_S * 1000)
    connection = amqp(gateway, "rex", tenant)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("inbox")
    try:
        assert producer.send("ledger", b"one").get(timeout=TIMEOUT_S).offset == 0
        channel.basic_publish("", "inbox", b"one")

        api.put(f"/permissions/{tenant}/shop/rex", json={**EVERYTHING, "write": "^$"}).raise_for_status()
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("ledger", b"two").get(timeout=TIMEOUT_S)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.basic_publish("", "inbox", b"two")
        assert closed.value.reply_code == 403    # ACCESS_REFUSED

        api.put(f"/permissions/{tenant}/shop/rex", json=EVERYTHING).raise_for_status()
        assert producer.send("ledger", b"three").get(timeout=TIMEOUT_S).offset == 1
        channel = connection.channel()           # the same connection, a new channel
        channel.confirm_delivery()
        channel.basic_publish("", "inbox", b"three")
    finally:
        producer.close(timeout=5)
        connection.close()


def test_a_tenant_admin_grants_inside_its_own_tenant_only(gateway, api) -> None:
    mine = namespace_with_user(api, "ada", tags=["tenant-admin"])
    api.put("/users/ula", json={"password": "ula-secret", "tenant": mine, "namespace": "shop",
                                "permissions": []}).raise_for_status()
    other = namespace_with_user(api, "oli")
    with httpx.Client(base_url=f"{gateway.admin_url}/api/v1", auth=("ada", "ada-secret"), timeout=30) as ada:
        # "*": every namespace of the tenant
        assert ada.put(f"/permissions/{mine}/*/ula", json=EVERYTHING).status_code == 200
        assert ada.put(f"/permissions/{other}/*/ula", json=EVERYTHING).status_code == 404
        assert ada.put(f"/permissions/{other}/shop/oli", json=EVERYTHING).status_code == 404
    assert delivery_error(gateway, "ula", "orders") is None   # granted by a tenant admin, no super user
    amqp(gateway, "ula", mine).close()
    attempts = [(line["event"], line["status"]) for line in audit_lines(gateway)
                if line.get("who") == "ada" and line["action"].startswith("PUT /api/v1/permissions/")]
    assert attempts == [("change", 200), ("failed", 404), ("failed", 404)]


def audit_lines(gateway) -> list[dict]:
    return [json.loads(line) for line in (gateway.data_dir / "audit.log").read_text().splitlines()]


def test_the_audit_log_has_each_change_and_counts_repeated_refusals(gateway, api) -> None:
    tenant = namespace_with_user(api, "ivy")
    api.put(f"/permissions/{tenant}/shop/ivy", json={**EVERYTHING, "write": "^$"}).raise_for_status()
    change = [line for line in audit_lines(gateway)
              if line["event"] == "change" and line["action"] == f"PUT /api/v1/permissions/{tenant}/shop/ivy"]
    assert len(change) == 1
    assert change[0]["who"] == "root" and change[0]["from"].startswith("127.0.0.1:") and change[0]["status"] == 200
    assert change[0]["before"] is None and change[0]["after"]["write"] == "^$"

    for _ in range(3):
        assert delivery_error(gateway, "ivy", "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with httpx.Client(base_url=f"{gateway.admin_url}/api/v1", auth=("ivy", "wrong"), timeout=30) as wrong:
        for _ in range(20):
            assert wrong.get("/tenants").status_code == 401

    def refusals(kind: str, resource: str) -> list[dict]:
        return [line for line in audit_lines(gateway) if line["event"] == "refused" and line["kind"] == kind
                and line["user"] == "ivy" and line["resource"] == resource]

    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and len(refusals("login", "login")) < 2:
        time.sleep(0.2)     # the count of an interval is written once it ends
    logins = refusals("login", "login")
    assert [line["count"] for line in logins] == [1, 19] and logins[0]["protocol"] == "admin"
    writes = refusals("authorization", f"topic {tenant}/shop/orders")
    assert writes and writes[0]["reason"] == "WRITE" and writes[0]["protocol"] == "kafka"


def test_an_operator_writes_kafka_acls_over_http_without_a_kafka_super_user(gateway, api) -> None:
    tenant = namespace_with_user(api, "kim")
    acl = {"resource_type": "TOPIC", "name": "pay", "pattern_type": "PREFIXED", "principal": "User:kim",
           "operation": "WRITE"}
    assert api.post(f"/tenants/{tenant}/acls", json=acl).status_code == 201
    assert api.post(f"/tenants/{tenant}/acls", json=acl).status_code == 200     # a set: stored once
    assert api.post(f"/tenants/{tenant}/acls", json={**acl, "operation": "FLY"}).status_code == 400
    listed = [a for a in api.get("/acls").json() if a["tenant"] == tenant]
    assert [(a["name"], a["operation"], a["permission"]) for a in listed] == [("pay", "WRITE", "ALLOW")]
    # a grant lets kim describe and create; the ACL lets it write "pay..." and nothing else
    api.put(f"/permissions/{tenant}/shop/kim", json={"configure": ".*", "write": "^$", "read": ".*"})
    assert delivery_error(gateway, "kim", "payments") is None
    assert delivery_error(gateway, "kim", "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert api.request("DELETE", f"/tenants/{tenant}/acls", json=acl).status_code == 204
    assert api.request("DELETE", f"/tenants/{tenant}/acls", json=acl).status_code == 404
    assert delivery_error(gateway, "kim", "payments").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    changes = [line for line in audit_lines(gateway) if line["event"] == "change"
               and line["target"] == f"acl of tenant {tenant}"]
    assert [(c["before"] is None, c["after"] is None) for c in changes] == [(True, False), (False, True)]


def test_a_role_grants_its_users_and_only_administrators_define_it(gateway, api) -> None:
    tenant = namespace_with_user(api, "rio", tags=["tenant-admin"])
    role = {"permissions": [{"tenant": tenant, "namespace": "shop", **EVERYTHING}]}
    with httpx.Client(base_url=f"{gateway.admin_url}/api/v1", auth=("rio", "rio-secret"), timeout=30) as rio:
        assert rio.put("/roles/shop-staff", json=role).status_code == 403
        assert rio.put("/users/rio", json={"roles": ["shop-staff"]}).status_code == 403
    assert api.put("/roles/shop-staff", json=role).status_code == 200
    assert delivery_error(gateway, "rio", "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert api.put("/users/rio", json={"roles": ["shop-staff"]}).json()["roles"] == ["shop-staff"]
    assert delivery_error(gateway, "rio", "orders") is None
    amqp(gateway, "rio", tenant).close()
    assert api.delete("/roles/shop-staff").status_code == 204
    assert delivery_error(gateway, "rio", "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_gateway_admin_gives_roles_and_grants_them(gateway, api) -> None:
    from typer.testing import CliRunner

    from gateway.admin_cli import admin_cli

    def admin(*args: str):   # in this process: the command line as typed, without a new interpreter
        env = {"GATEWAY_ADMIN_URL": gateway.admin_url, "GATEWAY_ADMIN_USER": ROOT[0],
               "GATEWAY_ADMIN_PASSWORD": ROOT[1], "COLUMNS": "200"}
        return CliRunner().invoke(admin_cli, list(args), env=env)

    tenant = namespace_with_user(api, "cli")
    granted = admin("roles", "grant", "cli-staff", tenant, "shop", "--write", "^orders$")
    assert granted.exit_code == 0, granted.output
    assert admin("users", "roles", "cli", "cli-staff").exit_code == 0
    assert delivery_error(gateway, "cli", "orders") is None
    listed = json.loads(admin("--json", "roles", "list").stdout)
    assert {"name": "cli-staff", "permissions": [{"tenant": tenant, "namespace": "shop", "configure": ".*",
                                                  "write": "^orders$", "read": ".*"}]} in listed
    assert admin("roles", "delete", "cli-staff").exit_code == 0
    assert admin("roles", "delete", "cli-staff").exit_code == 1

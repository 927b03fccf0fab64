"""The admin REST API against a real gateway: authentication, tenants and namespaces, users that
log in over Kafka SASL and AMQP as soon as they are created, and whose connections close when
they are deleted; the views of topics, subscriptions and connections."""

from __future__ import annotations

import uuid

import httpx
import pytest

from compat_tests.conftest import wait_for


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_anonymous_calls_get_401_and_the_openapi_document_is_public(admin_gateway):
    base = f"{admin_gateway.admin_url}/api/v1"
    for method, path in (("GET", "/tenants"), ("PUT", "/tenants/x"), ("GET", "/users"), ("GET", "/connections"),
                         ("PUT", "/users/x"), ("GET", "/tenants/public/namespaces")):
        answer = httpx.request(method, base + path, timeout=10)
        assert answer.status_code == 401, (method, path)
        assert answer.headers["www-authenticate"].startswith("Basic")
    assert httpx.get(base + "/tenants", auth=("root", "wrong"), timeout=10).status_code == 401
    assert httpx.get(base + "/tenants", auth=("plain", "plain-secret"), timeout=10).status_code == 403
    document = httpx.get(base + "/openapi.json", timeout=10).json()
    for path in ("/api/v1/tenants/{tenant}", "/api/v1/tenants/{tenant}/namespaces/{namespace}",
                 "/api/v1/tenants/{tenant}/namespaces", "/api/v1/users/{name}"):
        assert path in document["paths"]
    assert "put" in document["paths"]["/api/v1/users/{name}"]


def test_tenants_and_namespaces_are_created_listed_and_deleted(api):
    tenant = unique("acme")
    assert api.put(f"/tenants/{tenant}").status_code == 201
    assert api.put(f"/tenants/{tenant}").status_code == 200   # idempotent
    assert tenant in api.get("/tenants").json()
    created = api.put(f"/tenants/{tenant}/namespaces/payments")
    assert created.status_code == 201 and created.json()["topics"] == 0
    assert api.put(f"/tenants/{tenant}/namespaces/orders",
                   json={"policies": {"max_topics": 10, "retention_ms": 3_600_000}}).status_code == 201
    assert api.get(f"/tenants/{tenant}/namespaces").json() == ["orders", "payments"]
    assert api.put(f"/tenants/{tenant}/namespaces/orders").status_code == 200   # existed
    assert api.get(f"/tenants/{tenant}/namespaces/orders/policies").json() == {
        "max_topics": 10, "retention_ms": 3_600_000, "backlog_quota_action": "refuse_producers"}
    assert api.delete(f"/tenants/{tenant}/namespaces/orders").status_code == 204
    assert api.get(f"/tenants/{tenant}/namespaces").json() == ["payments"]
    assert api.get(f"/tenants/{tenant}/namespaces/orders").status_code == 404
    assert api.delete(f"/tenants/{tenant}").status_code == 204
    assert tenant not in api.get("/tenants").json()


@pytest.mark.parametrize("method, path, body, reason", [
    ("PUT", "/tenants/bad name", None, "illegal tenant name"),
    ("PUT", "/tenants/nosuch/namespaces/x", None, "does not exist"),
    ("PUT", "/tenants/public/namespaces/p1", {"policies": {"max_topics": -1}}, "max_topics must be"),
    ("PUT", "/tenants/public/namespaces/p2", {"policies": {"nonsense": 1}}, "unknown policy"),
    ("PUT", "/tenants/public/namespaces/p3", {"policies": {"backlog_quota_action": "explode"}}, "backlog_quota_action"),
    ("PUT", "/users/u1", {"tenant": "public", "namespace": "default"}, "needs a password"),
    ("PUT", "/users/u2", {"password": "x", "namespace": "nosuch"}, "does not exist"),
    ("PUT", "/users/u3", {"password": "x", "tags": ["bad tag!"]}, "tag"),
    ("PUT", "/users/u4", {"password": "x", "colour": "red"}, "colour"),
    ("PUT", "/permissions/public/default/root", {"read": "("}, "not a regular expression"),
    ("DELETE", "/tenants/public", None, "default tenant"),
])
def test_bad_input_gets_a_4xx_with_the_reason(api, method, path, body, reason):
    answer = api.request(method, path, json=body)
    assert 400 <= answer.status_code < 500, answer.text
    assert reason in answer.text
    namespaces = api.get("/tenants/public/namespaces").json()
    assert not {"p1", "p2", "p3"} & set(namespaces)   # nothing half-applied
    assert not {"u1", "u2", "u3", "u4"} & {user["name"] for user in api.get("/users").json()}


def test_a_created_user_logs_in_over_kafka_and_amqp_and_is_disconnected_when_deleted(admin_gateway, api):
    import pika
    from kafka import KafkaProducer

    tenant = unique("rt")
    api.put(f"/tenants/{tenant}").raise_for_status()
    api.put(f"/tenants/{tenant}/namespaces/payments").raise_for_status()
    answer = api.put("/users/carol", json={"password": "carol-secret", "tenant": tenant, "namespace": "payments"})
    assert answer.status_code == 201, answer.text
    assert answer.json()["mechanisms"] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]

    producer = KafkaProducer(bootstrap_servers="%s:%d" % admin_gateway.kafka, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="carol",
                             sasl_plain_password="carol-secret", client_id="carol-producer")
    producer.send("ledger", b"first").get(timeout=20)
    topics = api.get(f"/tenants/{tenant}/namespaces/payments/topics").json()
    assert [t["name"] for t in topics["topics"]] == ["ledger"]

    amqp = pika.BlockingConnection(pika.ConnectionParameters(
        *admin_gateway.amqp, virtual_host=f"{tenant}/payments",
        credentials=pika.PlainCredentials("carol", "carol-secret"), client_properties={"connection_name": "carol-amqp"}))
    amqp.channel().queue_declare("inbox")

    def carol_connections():
        return [c for c in api.get("/connections").json() if c["user"] == "carol"]
    listed = wait_for(lambda: len(carol_connections()) >= 2 and carol_connections(), "carol's connections")
    assert {c["protocol"] for c in listed} == {"kafka", "amqp"}
    assert {c["client_id"] for c in listed} >= {"carol-producer", "carol-amqp"}
    assert all(c["tenant"] == tenant and c["namespace"] == "payments" for c in listed)

    assert api.delete("/users/carol").status_code == 204
    wait_for(lambda: not carol_connections(), "carol's connections to close")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        for _ in range(100):
            amqp.process_data_events(time_limit=0.1)
    assert closed.value.reply_code == 320
    producer.close(timeout=1)
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(pika.ConnectionParameters(
            *admin_gateway.amqp, virtual_host=f"{tenant}/payments",
            credentials=pika.PlainCredentials("carol", "carol-secret"), connection_attempts=1))


def test_permissions_and_tags_change_at_runtime(admin_gateway, api):
    import pika

    tenant = unique("perm")
    api.put(f"/tenants/{tenant}").raise_for_status()
    for namespace in ("a", "b"):
        api.put(f"/tenants/{tenant}/namespaces/{namespace}").raise_for_status()
    api.put("/users/dave", json={"password": "dave-secret", "tenant": tenant, "namespace": "a"}).raise_for_status()

    def connect(vhost: str):
        return pika.BlockingConnection(pika.ConnectionParameters(
            *admin_gateway.amqp, virtual_host=vhost, credentials=pika.PlainCredentials("dave", "dave-secret"),
            connection_attempts=1))

    connect(f"{tenant}/a").close()
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        connect(f"{tenant}/b")
    granted = api.put(f"/permissions/{tenant}/b/dave", json={"configure": "^$", "write": ".*", "read": ".*"})
    assert granted.status_code == 200, granted.text
    connection = connect(f"{tenant}/b")   # its own namespace's implicit permission was kept too
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        connection.channel().queue_declare("not-allowed")
    assert refused.value.reply_code == 403
    connection.close()
    connect(f"{tenant}/a").close()
    assert {(p["user"], p["namespace"]) for p in api.get("/permissions").json() if p["tenant"] == tenant} == {
        ("dave", "a"), ("dave", "b")}
    assert api.delete(f"/permissions/{tenant}/b/dave").status_code == 204
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        connect(f"{tenant}/b")

    # Tagged administrator, dave may use the admin API at once; untagged again, no more.
    dave_api = httpx.Client(base_url=f"{admin_gateway.admin_url}/api/v1", auth=("dave", "dave-secret"), timeout=10)
    assert dave_api.get("/tenants").status_code == 403
    api.put("/users/dave", json={"tags": ["administrator"]}).raise_for_status()
    assert dave_api.get("/tenants").status_code == 200
    api.put("/users/dave", json={"tags": []}).raise_for_status()
    assert dave_api.get("/tenants").status_code == 403
    api.delete("/users/dave").raise_for_status()


def test_a_tenant_admin_sees_only_its_own_tenant(admin_gateway, api):
    mine, other = unique("mine"), unique("other")
    for tenant in (mine, other):
        api.put(f"/tenants/{tenant}").raise_for_status()
        api.put(f"/tenants/{tenant}/namespaces/ns").raise_for_status()
    api.put("/users/erin", json={"password": "erin-secret", "tenant": mine, "namespace": "ns",
                                 "tags": ["tenant-admin"]}).raise_for_status()
    with httpx.Client(base_url=f"{admin_gateway.admin_url}/api/v1", auth=("erin", "erin-secret"), timeout=10) as erin:
        assert erin.get("/tenants").json() == [mine]
        assert erin.get(f"/tenants/{other}/namespaces").status_code == 404
        assert erin.get(f"/tenants/{other}/namespaces/ns").status_code == 404
        assert erin.put(f"/tenants/{other}/namespaces/x").status_code == 404
        assert erin.put(f"/tenants/{mine}/namespaces/x").status_code == 201
        assert {u["name"] for u in erin.get("/users").json()} == {"erin"}
        assert erin.put("/users/eve", json={"password": "p", "tags": ["administrator"]}).status_code == 403
        api.put("/users/boss", json={"password": "boss-secret", "tenant": mine, "namespace": "ns",
                                     "tags": ["administrator"]}).raise_for_status()
        assert erin.put("/users/boss", json={"password": "taken-over"}).status_code == 403
        assert erin.delete("/users/boss").status_code == 403
        assert erin.put("/users/erin", json={"tags": ["tenant-admin", "x"]}).status_code == 200
        api.delete("/users/boss").raise_for_status()
        assert all(p["tenant"] == mine for p in erin.get("/permissions").json())
        assert erin.put(f"/tenants/{other}").status_code == 403
        assert other not in str(erin.get("/connections").json())
    api.delete("/users/erin").raise_for_status()


def test_a_namespace_with_topics_is_deleted_only_when_forced(admin_gateway, api):
    from kafka import KafkaProducer

    tenant = unique("del")
    api.put(f"/tenants/{tenant}").raise_for_status()
    api.put(f"/tenants/{tenant}/namespaces/ns").raise_for_status()
    api.put("/users/frank", json={"password": "frank-secret", "tenant": tenant, "namespace": "ns"}).raise_for_status()
    api.put("/users/grace", json={"password": "grace-secret", "permissions": [
        {"tenant": "public", "namespace": "default"}, {"tenant": tenant, "namespace": "ns"}]}).raise_for_status()
    api.put(f"/tenants/{tenant}/namespaces/ns/policies", json={"max_topics": 5}).raise_for_status()
    api.put("/users/carol", json={"password": "c", "tenant": tenant, "namespace": "ns"}).raise_for_status()
    producer = KafkaProducer(bootstrap_servers="%s:%d" % admin_gateway.kafka, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="carol", sasl_plain_password="c")
    for topic in ("t1", "t2", "t3"):
        producer.send(topic, b"x").get(timeout=20)
    producer.close()
    api.delete("/users/carol").raise_for_status()

    refused = api.delete(f"/tenants/{tenant}/namespaces/ns")
    assert refused.status_code == 409 and "3 topic(s)" in refused.text
    assert api.delete(f"/tenants/{tenant}").status_code == 409
    assert api.get(f"/tenants/{tenant}/namespaces/ns/topics").json()["total"] == 3
    assert api.delete(f"/tenants/{tenant}?force=true").status_code == 204
    assert tenant not in api.get("/tenants").json()
    grace = api.get("/users/grace").json()
    assert grace["permissions"] == [{"tenant": "public", "namespace": "default", "configure": ".*", "write": ".*",
                                     "read": ".*"}]
    # A namespace of the same name starts empty.
    api.put(f"/tenants/{tenant}").raise_for_status()
    assert api.put(f"/tenants/{tenant}/namespaces/ns").json()["topics"] == 0
    for user in ("frank", "grace"):
        api.delete(f"/users/{user}").raise_for_status()

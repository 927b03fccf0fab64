"""`gateway admin ...` against a real gateway: tables for people, --json for scripts, errors on stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

from compat_tests.admin.conftest import ADMIN


def admin(gateway, *args: str, password: str = ADMIN[1], extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(GATEWAY_ADMIN_URL=gateway.admin_url, GATEWAY_ADMIN_USER=ADMIN[0], GATEWAY_ADMIN_PASSWORD=password,
               COLUMNS="200", **(extra_env or {}))
    return subprocess.run([sys.executable, "-m", "gateway", "admin", *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_tenants_namespaces_and_users_from_the_command_line(admin_gateway, api):
    tenant = f"cli-{uuid.uuid4().hex[:6]}"
    assert admin(admin_gateway, "tenants", "create", tenant).returncode == 0
    created = admin(admin_gateway, "namespaces", "create", tenant, "ns", "--policy", "max_topics=7")
    assert created.returncode == 0, created.stderr
    assert "max_topics" in created.stdout
    listed = admin(admin_gateway, "--json", "namespaces", "list", tenant)
    assert json.loads(listed.stdout) == ["ns"]
    assert tenant in admin(admin_gateway, "tenants", "list").stdout.split()

    made = admin(admin_gateway, "users", "create", "henry", "--tenant", tenant, "--namespace", "ns",
                 extra_env={"GATEWAY_USER_PASSWORD": "henry-secret"})
    assert made.returncode == 0, made.stderr
    users = json.loads(admin(admin_gateway, "--json", "users", "list").stdout)
    assert {"name": "henry", "tenant": tenant, "namespace": "ns"}.items() <= next(
        u for u in users if u["name"] == "henry").items()
    table = admin(admin_gateway, "users", "list").stdout
    assert "henry" in table and tenant in table
    assert admin(admin_gateway, "users", "grant", "henry", "public", "default", "--configure", "^$").returncode == 0
    assert ("henry", "public", "default", "^$") in {(p["user"], p["tenant"], p["namespace"], p["configure"])
                                                    for p in api.get("/permissions").json()}
    assert admin(admin_gateway, "users", "delete", "henry").returncode == 0
    assert "henry" not in {u["name"] for u in api.get("/users").json()}

    # A forced deletion through the CLI deletes topic by topic behind a progress bar.
    from kafka import KafkaProducer
    api.put("/users/writer", json={"password": "w", "tenant": tenant, "namespace": "ns"}).raise_for_status()
    producer = KafkaProducer(bootstrap_servers="%s:%d" % admin_gateway.kafka, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="writer", sasl_plain_password="w")
    for topic in ("a", "b", "c"):
        producer.send(topic, b"x").get(timeout=20)
    producer.close()
    api.delete("/users/writer").raise_for_status()
    refused = admin(admin_gateway, "namespaces", "delete", tenant, "ns")
    assert refused.returncode == 1 and "409" in refused.stderr and "3 topic(s)" in refused.stderr
    forced = admin(admin_gateway, "tenants", "delete", tenant, "--force")
    assert forced.returncode == 0, forced.stderr
    assert tenant not in api.get("/tenants").json()


def test_errors_are_reported_with_the_api_reason(admin_gateway):
    wrong = admin(admin_gateway, "tenants", "list", password="wrong")
    assert wrong.returncode == 1 and "401" in wrong.stderr
    bad = admin(admin_gateway, "tenants", "create", "no good")
    assert bad.returncode == 1 and "illegal tenant name" in bad.stderr
    missing = admin(admin_gateway, "namespaces", "list", "nosuch-tenant")
    assert missing.returncode == 1 and "404" in missing.stderr

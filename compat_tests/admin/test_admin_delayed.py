"""Delayed messages through the admin API: pending counts per topic and per namespace, and
cancelling a held Kafka record by its id (its offset in __delayed_messages, found with the messages
route), through the API and `gateway admin`, also while its transaction is open; a cancelled record
is never delivered."""

from __future__ import annotations

import json
import time
import uuid

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests.admin.test_admin_cli import admin as run_admin


def _sasl(admin_gateway) -> dict:
    return {"bootstrap_servers": "%s:%d" % admin_gateway.kafka, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN", "sasl_plain_username": "writer", "sasl_plain_password": "w"}


def _tenant_with_delayed_topics(admin_gateway, api, *topics: str) -> str:
    """A new tenant with user "writer" in its namespace "ns", holding these delayed-delivery topics."""
    tenant = f"delayed-{uuid.uuid4().hex[:6]}"
    api.put(f"/tenants/{tenant}").raise_for_status()
    api.put(f"/tenants/{tenant}/namespaces/ns").raise_for_status()
    api.put("/users/writer", json={"password": "w", "tenant": tenant, "namespace": "ns"}).raise_for_status()
    admin = KafkaAdminClient(**_sasl(admin_gateway))
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"delayed.delivery.enable": "true"}) for topic in topics])
    admin.close()
    return tenant


def _timers_delivered(admin_gateway, due_ms: int) -> list[bytes]:
    """The values in "timers" (committed ones) once two are there and the due time is 1.5 s past."""
    consumer = KafkaConsumer(**_sasl(admin_gateway), enable_auto_commit=False, group_id=None,
                             isolation_level="read_committed")
    consumer.assign([TopicPartition("timers", 0)])
    consumer.seek_to_beginning()
    found = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (len(found) < 2 or time.time() * 1000 < due_ms + 1500):
        for records in consumer.poll(timeout_ms=200).values():
            found += [record.value for record in records]
    consumer.close()
    return found


def test_pending_counts_and_cancel_by_id(admin_gateway, api) -> None:
    tenant = _tenant_with_delayed_topics(admin_gateway, api, "timers", "other")
    producer = KafkaProducer(**_sasl(admin_gateway), linger_ms=0)
    due_ms = int(time.time() * 1000) + 4000
    for n in range(3):
        producer.send("timers", key=f"k{n}".encode(), value=f"timer-{n}".encode(),
                      headers=[("deliver-at-ms", str(due_ms).encode())]).get(timeout=20)
    producer.send("other", key=b"o", value=b"other", headers=[("deliver-after-ms", b"600000")]).get(timeout=20)
    producer.close()
    base = f"/tenants/{tenant}/namespaces/ns"

    assert api.get(f"{base}/topics/timers/delayed").json() == \
        {"topic": "timers", "pending": 3, "partitions": [{"partition": 0, "pending": 3}]}
    assert api.get(f"{base}/delayed").json()["pending"] == 4
    held = api.get(f"{base}/topics/__delayed_messages/messages", params={"key": "k1"}).json()["messages"]
    assert len(held) == 1
    message_id = held[0]["offset"]
    other_id = api.get(f"{base}/topics/__delayed_messages/messages", params={"key": "o"}).json()["messages"][0]["offset"]

    assert api.delete(f"{base}/topics/timers/delayed/{other_id}").status_code == 404    # not this topic's
    assert api.delete(f"{base}/topics/timers/delayed/{message_id}").status_code == 204
    assert api.delete(f"{base}/topics/timers/delayed/{message_id}").status_code == 404  # cancelled already
    assert api.delete(f"{base}/delayed/999999").status_code == 404
    assert api.get(f"{base}/topics/timers/delayed").json()["pending"] == 2
    shown = run_admin(admin_gateway, "--json", "topics", "delayed", tenant, "ns", "timers")
    assert shown.returncode == 0 and json.loads(shown.stdout)["partitions"] == [{"partition": 0, "pending": 2}]
    assert api.get(f"{base}/topics/nope/delayed").status_code == 404
    assert api.delete(f"{base}/topics/__delayed_messages").status_code == 403     # a system topic

    assert _timers_delivered(admin_gateway, due_ms) == [b"timer-0", b"timer-2"]
    assert api.get(f"{base}/topics/timers/delayed").json()["pending"] == 0
    assert run_admin(admin_gateway, "topics", "cancel-delayed", tenant, "ns", "other", str(other_id)).returncode == 0
    assert run_admin(admin_gateway, "topics", "cancel-delayed", tenant, "ns", "other", str(other_id)).returncode != 0
    assert api.get(f"{base}/delayed").json() == {"pending": 0, "targets": {}}


def test_a_record_of_an_open_transaction_is_cancelled_and_its_commit_leaves_it_out(admin_gateway, api) -> None:
    tenant = _tenant_with_delayed_topics(admin_gateway, api, "timers")
    producer = KafkaProducer(**_sasl(admin_gateway), transactional_id=f"t-{tenant}")
    producer.init_transactions()
    producer.begin_transaction()
    due_ms = int(time.time() * 1000) + 3000
    for n in range(3):
        producer.send("timers", key=f"k{n}".encode(), value=f"timer-{n}".encode(),
                      headers=[("deliver-at-ms", str(due_ms).encode())])
    producer.flush(timeout=20)
    base = f"/tenants/{tenant}/namespaces/ns"
    held = api.get(f"{base}/topics/__delayed_messages/messages", params={"key": "k1"}).json()["messages"]
    assert len(held) == 1
    assert api.delete(f"{base}/topics/timers/delayed/{held[0]['offset']}").status_code == 204
    assert api.delete(f"{base}/topics/timers/delayed/{held[0]['offset']}").status_code == 404
    producer.commit_transaction()
    producer.close()
    assert api.get(f"{base}/topics/timers/delayed").json()["pending"] == 2

    assert _timers_delivered(admin_gateway, due_ms) == [b"timer-0", b"timer-2"]

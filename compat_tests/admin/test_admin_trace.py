"""Message trace with real clients: off by default; on for a namespace, a Kafka message's trace
names its producer and the consumers that read it, an AMQP message's its publisher, and each
subscription says whether it acknowledged the message."""

from __future__ import annotations

import time
import uuid

from compat_tests.conftest import wait_for


def test_trace_of_a_kafka_and_an_amqp_message(admin_gateway, api):
    import pika
    from kafka import KafkaConsumer, KafkaProducer

    tenant = f"trace-{uuid.uuid4().hex[:6]}"
    api.put(f"/tenants/{tenant}").raise_for_status()
    api.put(f"/tenants/{tenant}/namespaces/ns").raise_for_status()
    api.put("/users/writer", json={"password": "w", "tenant": tenant, "namespace": "ns"}).raise_for_status()
    kafka = dict(bootstrap_servers="%s:%d" % admin_gateway.kafka, security_protocol="SASL_PLAINTEXT",
                 sasl_mechanism="PLAIN", sasl_plain_username="writer", sasl_plain_password="w")
    base = f"/tenants/{tenant}/namespaces/ns/topics"

    producer = KafkaProducer(client_id="untraced-producer", **kafka)
    producer.send("orders", b"before").get(timeout=20)
    untraced = api.get(f"{base}/orders/partitions/0/offsets/0").json()
    assert untraced["message"]["value"] == "before" and untraced["events"] == []

    api.put(f"/tenants/{tenant}/namespaces/ns/policies", json={"trace": True}).raise_for_status()
    producer.close()
    producer = KafkaProducer(client_id="billing-producer", **kafka)

    def traced_produce() -> bool:
        # The policy reaches the partition through a watch (a message sent before may go untraced),
        # and events are written a moment after the append.
        offset = producer.send("orders", b"traced").get(timeout=20).offset
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            events = api.get(f"{base}/orders/partitions/0/offsets/{offset}").json()["events"]
            if any(e["event"] == "produced" for e in events):
                return True
            time.sleep(0.1)
        return False
    wait_for(traced_produce, "a traced produce")
    consumer = KafkaConsumer("orders", group_id="billing", client_id="billing-reader", auto_offset_reset="earliest",
                             enable_auto_commit=False, **kafka)
    got = []
    end = api.get(f"{base}/orders").json()["partitions"][0]["end_offset"]
    wait_for(lambda: got.extend(r for rs in consumer.poll(500).values() for r in rs) or len(got) >= end, "every record")
    consumer.commit()

    def traced():
        trace = api.get(f"{base}/orders/partitions/0/offsets/{end - 1}").json()
        return trace if any(e["event"] == "read" for e in trace["events"]) else None
    trace = wait_for(traced, "the read event")
    produced = next(e for e in trace["events"] if e["event"] == "produced")
    assert (produced["protocol"], produced["client_id"], produced["user"]) == ("kafka", "billing-producer", "writer")
    assert produced["first"] <= end - 1 <= produced["last"] and produced["at_ms"] > 0
    assert any(e["client_id"] == "billing-reader" for e in trace["events"] if e["event"] == "read")
    billing = next(s for s in trace["subscriptions"] if s["cursor"].endswith("billing"))
    assert billing["acknowledged"] is True and billing["position"] == end

    connection = pika.BlockingConnection(pika.ConnectionParameters(
        *admin_gateway.amqp, virtual_host=f"{tenant}/ns", credentials=pika.PlainCredentials("writer", "w"),
        client_properties={"connection_name": "mailer"}))
    channel = connection.channel()
    channel.queue_declare("inbox")
    channel.confirm_delivery()
    channel.basic_publish("", "inbox", b"mail", pika.BasicProperties(message_id="mail-1"))
    topic = next(q["topic"] for q in api.get(f"/tenants/{tenant}/namespaces/ns/queues").json() if q["name"] == "inbox")
    amqp_trace = wait_for(lambda: (t := api.get(f"{base}/{topic}/partitions/0/offsets/0").json())["events"] and t,
                          "the publish event")
    publish = amqp_trace["events"][0]
    assert (publish["event"], publish["protocol"], publish["client_id"]) == ("produced", "amqp", "mailer")
    assert amqp_trace["message"]["amqp"]["message_id"] == "mail-1"
    assert [s["acknowledged"] for s in amqp_trace["subscriptions"]] == [False]
    connection.close()

    assert api.get(f"{base}/orders/partitions/0/offsets/99").status_code == 404
    consumer.close()
    producer.close()
    api.delete("/users/writer").raise_for_status()


def test_trace_of_an_amqp_message_through_its_queue(admin_gateway, api):
    """Delivered to which consumer, requeued by a nack, redelivered, acknowledged; and a message
    rejected without requeue dead-lettered, with its reason."""
    import pika

    tenant = f"trace-{uuid.uuid4().hex[:6]}"
    api.put(f"/tenants/{tenant}").raise_for_status()
    api.put(f"/tenants/{tenant}/namespaces/ns").raise_for_status()
    api.put(f"/tenants/{tenant}/namespaces/ns/policies", json={"trace": True}).raise_for_status()
    api.put("/users/writer", json={"password": "w", "tenant": tenant, "namespace": "ns"}).raise_for_status()
    base = f"/tenants/{tenant}/namespaces/ns/topics"
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        *admin_gateway.amqp, virtual_host=f"{tenant}/ns", credentials=pika.PlainCredentials("writer", "w"),
        client_properties={"connection_name": "worker"}))
    channel = connection.channel()
    channel.queue_declare("dead")
    channel.queue_declare("jobs", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
    channel.confirm_delivery()
    topic = next(q["topic"] for q in api.get(f"/tenants/{tenant}/namespaces/ns/queues").json() if q["name"] == "jobs")

    def events_of(offset: int) -> list[dict]:
        """The message's trace events (it may be gone already: an acknowledged queue message goes
        at once; its trace stays)."""
        answer = api.get(f"{base}/{topic}/partitions/0/offsets/{offset}")
        return answer.json()["events"] if answer.status_code == 200 else []

    def traced_publish() -> bool:
        # The policy reaches the queue through a watch (a message sent before may go untraced), and
        # events are written a moment after they happen.
        channel.basic_publish("", "jobs", b"job")
        for method, _, _ in channel.consume("jobs", inactivity_timeout=5):
            channel.basic_ack(method.delivery_tag)
            break
        channel.cancel()
        offset = api.get(f"{base}/{topic}").json()["partitions"][0]["end_offset"] - 1
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            if any(e["event"] == "acked" for e in events_of(offset)):
                return True
            time.sleep(0.1)
        return False
    wait_for(traced_publish, "a traced publish")
    offset = api.get(f"{base}/{topic}").json()["partitions"][0]["end_offset"]
    channel.basic_publish("", "jobs", b"retry me")
    tags = []
    for method, _, _ in channel.consume("jobs", consumer_tag="retrier", inactivity_timeout=10):
        tags.append(method.delivery_tag)
        if len(tags) == 1:
            channel.basic_nack(method.delivery_tag, requeue=True)
        else:
            channel.basic_ack(method.delivery_tag)
            break
    channel.cancel()

    def kinds() -> list[str]:
        return [e["event"] for e in events_of(offset) if e.get("queue") == "jobs"]
    wait_for(lambda: kinds() == ["delivered", "requeued", "delivered", "acked"], "the queue's events")
    delivered = [e for e in events_of(offset) if e["event"] == "delivered"]
    assert [(e["consumer_tag"], e["client_id"], e["redelivered"]) for e in delivered] == [
        ("retrier", "worker", False), ("retrier", "worker", True)]

    channel.basic_publish("", "jobs", b"poison")
    method, _, _ = next(channel.consume("jobs", inactivity_timeout=10))
    channel.basic_reject(method.delivery_tag, requeue=False)
    channel.cancel()
    dead = wait_for(lambda: next((e for e in events_of(offset + 1) if e["event"] == "dead-lettered"), None),
                    "the dead-letter event")
    assert (dead["queue"], dead["reason"]) == ("jobs", "rejected") and "client_id" not in dead
    assert "rejected" in [e["event"] for e in events_of(offset + 1)]
    connection.close()
    api.delete("/users/writer").raise_for_status()

"""Message query through the admin API, across both protocols: by offset, by time range, by key, by
a Kafka header and by an AMQP message-id; a scan cut short by its limit says where to go on."""

from __future__ import annotations

import uuid


def test_messages_are_found_by_offset_time_key_header_and_message_id(admin_gateway, api):
    import pika
    from kafka import KafkaProducer

    tenant = f"query-{uuid.uuid4().hex[:6]}"
    api.put(f"/tenants/{tenant}").raise_for_status()
    api.put(f"/tenants/{tenant}/namespaces/ns").raise_for_status()
    api.put("/users/writer", json={"password": "w", "tenant": tenant, "namespace": "ns"}).raise_for_status()
    producer = KafkaProducer(bootstrap_servers="%s:%d" % admin_gateway.kafka, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="writer", sasl_plain_password="w",
                             linger_ms=0)
    base_ms = 1_700_000_000_000
    for n in range(10):
        producer.send("events", key=f"k{n % 3}".encode(), value=f"event-{n}".encode(),
                      headers=[("trace", f"t{n}".encode())], timestamp_ms=base_ms + n * 1000).get(timeout=20)
    producer.send("events", value=b"\xff\xfe").get(timeout=20)
    producer.close()
    base = f"/tenants/{tenant}/namespaces/ns/topics/events/messages"

    by_offset = api.get(base, params={"partition": 0, "offset": 4, "limit": 3}).json()
    assert [m["value"] for m in by_offset["messages"]] == ["event-4", "event-5", "event-6"]
    assert by_offset["complete"] is False and by_offset["next_offsets"] == {"0": 7}
    first = by_offset["messages"][0]
    assert first["protocol"] == "kafka" and first["key"] == "k1" and first["headers"] == [["trace", "t4"]]
    assert first["timestamp_ms"] == base_ms + 4000

    by_time = api.get(base, params={"start_ms": base_ms + 2500, "end_ms": base_ms + 5000}).json()
    assert [m["offset"] for m in by_time["messages"]] == [3, 4]
    by_key = api.get(base, params={"key": "k2"}).json()
    assert [m["offset"] for m in by_key["messages"]] == [2, 5, 8] and by_key["complete"] is True
    by_header = api.get(base, params={"header": "trace:t7"}).json()
    assert [m["value"] for m in by_header["messages"]] == ["event-7"]
    binary = api.get(base, params={"offset": 10}).json()["messages"]
    assert binary[0]["value"] == {"base64": "//4="}

    amqp = pika.BlockingConnection(pika.ConnectionParameters(
        *admin_gateway.amqp, virtual_host=f"{tenant}/ns", credentials=pika.PlainCredentials("writer", "w")))
    channel = amqp.channel()
    channel.queue_declare("orders")
    channel.confirm_delivery()      # each publish stored before the query looks for it
    for n in range(5):
        channel.basic_publish("", "orders", f"order-{n}".encode(),
                              pika.BasicProperties(message_id=f"m-{n}", content_type="text/plain"))
    amqp.close()
    topic = next(q["topic"] for q in api.get(f"/tenants/{tenant}/namespaces/ns/queues").json() if q["name"] == "orders")
    found = api.get(f"/tenants/{tenant}/namespaces/ns/topics/{topic}/messages", params={"message_id": "m-3"}).json()
    assert [m["value"] for m in found["messages"]] == ["order-3"]
    message = found["messages"][0]
    assert message["protocol"] == "amqp"
    assert message["amqp"]["routing_key"] == "orders" and message["amqp"]["content_type"] == "text/plain"

    assert api.get(base, params={"partition": 5}).status_code == 400
    assert api.get(base, params={"header": "no-colon"}).status_code == 400
    assert api.get(f"/tenants/{tenant}/namespaces/ns/topics/nosuch/messages").status_code == 404
    api.delete("/users/writer").raise_for_status()

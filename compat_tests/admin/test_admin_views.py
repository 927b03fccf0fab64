"""The admin API's read views with real clients: a topic's partitions, and its subscriptions as one
list whatever the protocol: a Kafka group, a Kafka consumer in assign() mode (which no group
knows of) and an AMQP queue, each with its consumers' client ids and addresses."""

from __future__ import annotations

import uuid

from compat_tests.conftest import wait_for


def test_subscriptions_of_both_protocols_with_their_consumers(admin_gateway, api):
    import pika
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    tenant = f"views-{uuid.uuid4().hex[:6]}"
    api.put(f"/tenants/{tenant}").raise_for_status()
    api.put(f"/tenants/{tenant}/namespaces/ns").raise_for_status()
    api.put("/users/writer", json={"password": "w", "tenant": tenant, "namespace": "ns"}).raise_for_status()
    kafka = dict(bootstrap_servers="%s:%d" % admin_gateway.kafka, security_protocol="SASL_PLAINTEXT",
                 sasl_mechanism="PLAIN", sasl_plain_username="writer", sasl_plain_password="w")
    producer = KafkaProducer(**kafka)
    for n in range(5):
        producer.send("orders", f"order-{n}".encode()).get(timeout=20)
    producer.close()

    grouped = KafkaConsumer("orders", group_id="billing", client_id="billing-1", auto_offset_reset="earliest",
                            enable_auto_commit=False, **kafka)
    taken = []
    wait_for(lambda: taken.extend(r for rs in grouped.poll(500).values() for r in rs) or len(taken) >= 5, "5 records")
    grouped.commit()
    assigned = KafkaConsumer(client_id="auditor", **kafka)
    assigned.assign([TopicPartition("orders", 0)])
    assigned.seek(TopicPartition("orders", 0), 2)
    wait_for(lambda: assigned.poll(200) or True and assigned.position(TopicPartition("orders", 0)) == 5,
             "the assign()-mode consumer to catch up")

    amqp = pika.BlockingConnection(pika.ConnectionParameters(
        *admin_gateway.amqp, virtual_host=f"{tenant}/ns", credentials=pika.PlainCredentials("writer", "w"),
        client_properties={"connection_name": "mailer"}))
    channel = amqp.channel()
    channel.queue_declare("inbox")
    channel.exchange_declare("mail", "topic")
    channel.queue_bind("inbox", "mail", "mail.#")
    for n in range(3):
        channel.basic_publish("", "inbox", f"mail-{n}".encode())
    channel.basic_qos(prefetch_count=1)
    channel.basic_consume("inbox", lambda *args: None, consumer_tag="mailer-1")
    amqp.process_data_events(time_limit=0.5)

    topic = api.get(f"/tenants/{tenant}/namespaces/ns/topics/orders").json()
    assert [(p["partition"], p["start_offset"], p["end_offset"]) for p in topic["partitions"]] == [(0, 0, 5)]
    assert topic["partitions"][0]["size_bytes"] > 0

    def subscriptions():
        found = {(s["kind"], s["topic"], s["name"]): s
                 for s in api.get(f"/tenants/{tenant}/namespaces/ns/subscriptions").json()}
        group = found.get(("kafka-group", "orders", "billing"))
        # A queue's cursor is stored once its consumer got something: a moment after the publishes.
        ready = group and group["consumers"] and ("kafka-assign", "orders", None) in found and \
            any(kind == "amqp-queue" for kind, _, _ in found)
        return found if ready else None
    found = wait_for(subscriptions, "the group's member, the assign()-mode consumer and the queue")

    group = found[("kafka-group", "orders", "billing")]
    assert group["partitions"] == [{"partition": 0, "position": 5, "backlog": 0}]
    assert [c["client_id"] for c in group["consumers"]] == ["billing-1"]
    assert group["consumers"][0]["partitions"] == [0]
    loose = found[("kafka-assign", "orders", None)]["consumers"]
    assert [(c["client_id"], c["partitions"], c["user"]) for c in loose] == [("auditor", [0], "writer")]
    assert loose[0]["address"].startswith("127.0.0.1:")
    queue = next(s for key, s in found.items() if key[0] == "amqp-queue")
    assert queue["name"] == "inbox" and queue["partitions"][0]["backlog"] == 3   # delivered, none acked
    assert queue["subscription_type"] == "shared"
    assert [(c["client_id"], c["consumer_tag"]) for c in queue["consumers"]] == [("mailer", "mailer-1")]

    queues = api.get(f"/tenants/{tenant}/namespaces/ns/queues").json()
    assert [(q["name"], q["messages"], len(q["consumers"]), q["subscription_type"], q["parked_groups"])
            for q in queues] == [("inbox", 3, 1, "shared", [])]
    exchanges = {e["name"]: e for e in api.get(f"/tenants/{tenant}/namespaces/ns/exchanges").json()}
    assert exchanges["mail"]["type"] == "topic"
    assert [(b["destination"], b["key"]) for b in exchanges["mail"]["bindings"]] == [("inbox", "mail.#")]

    # An operator closes the assign()-mode consumer's connection.
    auditor = next(c for c in api.get("/connections").json() if c["client_id"] == "auditor")
    assert auditor["fetching"] == {"orders": [0]}
    assert api.delete(f"/connections/{auditor['id']}").status_code == 204
    wait_for(lambda: all(c["id"] != auditor["id"] for c in api.get("/connections").json()), "the connection to close")
    assert api.delete("/connections/999999").status_code == 404

    assigned.close()
    grouped.close()
    amqp.close()
    api.delete("/users/writer").raise_for_status()


def test_a_parked_message_group_is_shown_and_released(admin_gateway, api):
    """A key-shared queue whose message exhausted its deliveries parks its group: the queue view
    lists it, and releasing it lets the group's next message out."""
    import pika

    queue = f"parked-{uuid.uuid4().hex[:6]}"
    amqp = pika.BlockingConnection(pika.ConnectionParameters(*admin_gateway.amqp))
    try:
        channel = amqp.channel()
        channel.queue_declare(queue, arguments={"x-subscription-type": "key-shared", "x-delivery-limit": 1})
        for body in (b"poison", b"next"):
            channel.basic_publish("", queue, body, pika.BasicProperties(headers={"x-group-id": "order-9"}))
        got = []
        channel.basic_qos(prefetch_count=10)
        channel.basic_consume(queue, lambda ch, method, _props, body: got.append((method.delivery_tag, body)))

        def next_delivery():
            amqp.process_data_events(time_limit=0.2)
            return got.pop(0) if got else None
        for _ in range(2):                       # delivered twice, then dead: the group parks
            tag, body = wait_for(next_delivery, "a delivery")
            assert body == b"poison"
            channel.basic_nack(tag, requeue=True)

        def parked():
            amqp.process_data_events(time_limit=0.2)
            views = api.get("/tenants/public/namespaces/default/queues").json()
            return next(q for q in views if q["name"] == queue)["parked_groups"]
        assert [g["group"] for g in wait_for(parked, "the group to park")] == ["order-9"]
        assert got == []
        release = f"/tenants/public/namespaces/default/queues/{queue}/parked-groups/order-9/release"
        assert api.post(release).status_code == 204
        assert wait_for(next_delivery, "the group's next message")[1] == b"next"
        assert api.post(release).status_code == 404
    finally:
        amqp.close()

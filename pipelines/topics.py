"""The pipeline's topics on the gateway, over the network with kafka-python: creating them, and
their offsets (what an explicit batch range may name)."""

from __future__ import annotations

import json
import logging
import time

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from pipelines.problems import UsageProblem

log = logging.getLogger("pipelines.topics")


class BadRange(UsageProblem):
    """An explicit offset range that the topics do not hold."""


def ensure_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    """Create every topic of `partitions` that does not exist yet; existing ones are left as they are."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="gateway-recon-admin")
    try:
        existing = set(admin.list_topics())
        missing = [NewTopic(name, count, 1) for name, count in partitions.items() if name not in existing]
        if missing:
            try:
                admin.create_topics(missing, raise_errors=True)
            except TopicAlreadyExistsError:  # created meanwhile by someone else: fine
                pass
            log.info("created topics %s", ", ".join(f"{t.name}({t.num_partitions})" for t in missing))
    finally:
        admin.close()


def log_ends(bootstrap: str, topics: list[str], wait_s: float = 10.0) -> dict[str, dict[str, int]]:
    """{topic: {partition: the offset after its last record}} (Spark's endingOffsets JSON form)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="gateway-recon-offsets", group_id=None,
                             enable_auto_commit=False)
    try:
        deadline = time.monotonic() + wait_s
        while True:   # a topic just created may take a metadata refresh to show its partitions
            partitions = {topic: consumer.partitions_for_topic(topic) for topic in topics}
            unknown = [topic for topic, found in partitions.items() if not found]
            if not unknown:
                break
            if time.monotonic() >= deadline:
                raise BadRange(f"no topic {', '.join(unknown)} on {bootstrap}")
            time.sleep(0.2)
        ends = consumer.end_offsets([TopicPartition(topic, p) for topic, found in partitions.items() for p in found])
        return {topic: {str(tp.partition): ends[tp] for tp in sorted(ends) if tp.topic == topic} for topic in topics}
    finally:
        consumer.close()


def check_range(bootstrap: str, ending_offsets: str, topics: list[str]) -> None:
    """An explicit endingOffsets JSON must stay within each partition's log: Spark would otherwise
    wait its poll timeout for records that are not there and fail with "Some data may have been lost"."""
    if ending_offsets in ("latest", "earliest"):
        return
    try:
        asked = json.loads(ending_offsets)
    except json.JSONDecodeError as exc:
        raise BadRange(f"--ending-offsets is latest or JSON {{topic: {{partition: offset}}}}: {exc}") from None
    ends = log_ends(bootstrap, topics)
    problems = []
    for topic in topics:
        for partition, offset in asked.get(topic, {}).items():
            end = ends[topic].get(str(partition))
            if end is None:
                problems.append(f"{topic} has no partition {partition}")
            elif offset > end:   # -1 (latest) and -2 (earliest) are below every end
                problems.append(f"{topic}-{partition} ends at {end}, not {offset}")
    if problems:
        raise BadRange(f"--ending-offsets past the end of the log: {'; '.join(problems)}. Use --ending-offsets "
                       f"latest, or the ends as they are now: {json.dumps(ends, separators=(',', ':'))}")

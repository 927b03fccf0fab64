"""Creating the pipeline's topics on the gateway (kafka-python's admin client, over the network)."""

from __future__ import annotations

import logging

from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

log = logging.getLogger("pipelines.topics")


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

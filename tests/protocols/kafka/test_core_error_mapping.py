"""Every core error has its own Kafka error code in protocols.kafka.errors.CORE_TO_KAFKA."""

from __future__ import annotations

import importlib
import pkgutil

import core
from core.errors import CoreError
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import CORE_TO_KAFKA, kafka_code


def all_core_errors() -> set[type[CoreError]]:
    # Import every core module first: an error class defined outside core/errors.py counts too.
    for info in pkgutil.walk_packages(core.__path__, prefix="core."):
        importlib.import_module(info.name)
    found: set[type[CoreError]] = set()
    todo = [CoreError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_every_core_error_has_a_kafka_code():
    missing = sorted(cls.__qualname__ for cls in all_core_errors() if cls not in CORE_TO_KAFKA)
    assert not missing, f"add these to protocols/kafka/errors.py CORE_TO_KAFKA: {missing}"


def test_the_walk_finds_the_known_errors():
    from core.errors import RecordTooLarge, UnknownTopic
    assert {CoreError, UnknownTopic, RecordTooLarge} <= all_core_errors()


def test_kafka_code_uses_the_table():
    from core.errors import RecordTooLarge, UnknownTopic
    assert kafka_code(UnknownTopic("t")) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert kafka_code(RecordTooLarge("big")) == ErrorCode.MESSAGE_TOO_LARGE

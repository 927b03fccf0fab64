"""The committed protobuf module is what its .proto gives, and the core's errors all have a Pulsar code."""

from __future__ import annotations

import inspect

import pytest

from core import errors as core_errors
from protocols.pulsar.codec.pulsar_wire_pb2 import UnknownError
from protocols.pulsar.errors import SERVER_ERRORS, server_error
from protocols.pulsar.generate_proto import MODULE, generated
from protocols.pulsar.names import parse_topic


def _descriptor(module_text: str) -> str:
    # the serialized .proto the module registers: what matters, whatever protoc version wrote the rest
    [line] = [line for line in module_text.splitlines() if "AddSerializedFile(" in line]
    return line


def test_the_committed_module_matches_the_proto():
    assert _descriptor(MODULE.read_text()) == _descriptor(generated()), "run `make pulsar-proto` and commit it"


def test_every_core_error_maps_to_a_pulsar_error_class():
    covered = {kind for kind, _ in SERVER_ERRORS}
    every = [c for _, c in inspect.getmembers(core_errors, inspect.isclass) if issubclass(c, core_errors.CoreError)]
    for error in every:
        assert any(issubclass(error, kind) for kind in covered), error
    assert server_error(core_errors.UnknownTopic("x")) != UnknownError
    assert server_error(RuntimeError("x")) == UnknownError


@pytest.mark.parametrize("text, expected", [
    ("orders", ("public", "default", "orders", None)),
    ("t/ns/orders", ("t", "ns", "orders", None)),
    ("persistent://t/ns/orders-partition-3", ("t", "ns", "orders", 3)),
    ("persistent://public/default/a-partition-x", ("public", "default", "a-partition-x", None)),
])
def test_topic_names(text, expected):
    topic = parse_topic(text)
    assert (topic.name.tenant, topic.name.namespace, topic.name.topic, topic.partition) == expected


@pytest.mark.parametrize("text", ["non-persistent://public/default/x", "persistent://a/b", "a/b", "bad name",
                                  "persistent://public/default/x/y"])
def test_bad_topic_names(text):
    with pytest.raises(core_errors.InvalidName):
        parse_topic(text)

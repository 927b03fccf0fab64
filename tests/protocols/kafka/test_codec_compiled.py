"""The generated struct codecs (codec/compile.py) at their edges: a run of fixed-width fields cut
short, a value that does not fit its wire type, and decoded fields read as attributes."""

from __future__ import annotations

import pytest

from protocols.kafka import registry
from protocols.kafka.codec import types as t
from protocols.kafka.codec.compile import Msg, request_codec, response_codec
from protocols.kafka.codec.errors import DecodeError

FETCH = registry.APIS[1]


def fetch_request(partitions: list[dict]) -> bytes:
    out = bytearray()
    request_codec(FETCH, 11).write(out, {"topics": [{"topic": "t", "partitions": partitions}],
                                         "forgotten_topics_data": [], "rack_id": ""})
    return bytes(out)


def test_a_partition_entry_cut_inside_its_fixed_fields_is_a_decode_error() -> None:
    whole = fetch_request([{"partition": 3, "fetch_offset": 7}])
    # The last field (rack_id, an empty string) is 2 bytes; the partition entry ends before it.
    for cut in range(1, 28):
        with pytest.raises(DecodeError):
            request_codec(FETCH, 11).read(t.Reader(whole[:len(whole) - 2 - cut]))


def test_fields_read_as_attributes_and_as_items() -> None:
    msg = request_codec(FETCH, 11).read(t.Reader(fetch_request([{"partition": 3, "fetch_offset": 7}])))
    asked = msg.topics[0].partitions[0]
    assert isinstance(asked, Msg)
    assert (asked.partition, asked.fetch_offset, asked.current_leader_epoch) == (3, 7, -1)
    assert asked["fetch_offset"] == 7 and dict(asked)["partition"] == 3
    assert msg.isolation_level == 0   # present in v11
    with pytest.raises(AttributeError):
        asked.no_such_field


def test_a_value_that_does_not_fit_its_type_is_refused_when_writing() -> None:
    with pytest.raises(ValueError):
        fetch_request([{"partition": 1 << 31}])                        # int32 in a run
    with pytest.raises(ValueError):
        response_codec(FETCH, 11).write(bytearray(), {"error_code": None, "responses": []})


def test_a_missing_field_is_written_with_its_declared_default() -> None:
    written, expected = bytearray(), bytearray()
    request_codec(FETCH, 11).write(written, {"topics": [], "forgotten_topics_data": [], "rack_id": ""})
    declared = {"replica_id": 0, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 0x7FFFFFFF, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1, "topics": [], "forgotten_topics_data": [], "rack_id": ""}
    request_codec(FETCH, 11).write(expected, declared)
    assert request_codec(FETCH, 11).read(t.Reader(written)) == request_codec(FETCH, 11).read(t.Reader(expected))

"""decode(encode(x)) == x for the request and the response of every served (API, version).

The (API, version) pairs come from the handler registry when the tests are collected, and the
values from hypothesis strategies built from each declaration (fields, types, versions, nullable
versions, tagged fields), so an API added by anyone is covered without touching this file.
Requests go through the connection machine (the real decode path, header included); responses are
read back with a test-only decoder made of the same compiled codecs.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols.kafka import registry
from protocols.kafka.codec import types as t
from protocols.kafka.codec.compile import request_codec, response_codec
from protocols.kafka.codec.declare import MISSING, Api, Array, Field
from protocols.kafka.codec.frames import RequestHeader
from protocols.kafka.machine.connection import KafkaServerConnection, Limits, RequestReceived

_INTS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)


def _primitive(type_: str) -> st.SearchStrategy[Any]:
    if type_ in _INTS:
        bits = _INTS[type_]
        return st.integers(min_value=-(1 << (bits - 1)), max_value=(1 << (bits - 1)) - 1)
    if type_ == "uint16":
        return st.integers(min_value=0, max_value=0xFFFF)
    if type_ == "uint32":
        return st.integers(min_value=0, max_value=0xFFFFFFFF)
    if type_ == "float64":
        return st.floats(allow_nan=False)
    if type_ == "bool":
        return st.booleans()
    if type_ == "uuid":
        return st.uuids() | st.just(uuid.UUID(int=0))
    if type_ == "string":
        return _TEXT
    if type_ in ("bytes", "records"):
        return st.binary(max_size=24)
    raise AssertionError(f"no strategy for wire type {type_!r}: extend this test")


def value_strategy(type_: Any, version: int, nullable: bool) -> st.SearchStrategy[Any]:
    if isinstance(type_, tuple):
        inner = struct_strategy(type_, version)
    elif isinstance(type_, Array):
        inner = st.lists(value_strategy(type_.item, version, False), max_size=3)
    else:
        inner = _primitive(type_)
    return st.none() | inner if nullable else inner


def struct_strategy(fields: tuple[Field, ...], version: int) -> st.SearchStrategy[dict]:
    """Values for the fields present at `version`; absent ones are left out, as a client would."""
    return st.fixed_dictionaries({field.name: value_strategy(field.type, version, version in field.nullable)
                                  for field in fields if version in field.versions})


def expected(fields: tuple[Field, ...], version: int, value: dict) -> dict:
    """What decoding must give: the value, nested structs likewise, absent fields at their defaults."""
    result = {}
    for field in fields:
        if version in field.versions:
            result[field.name] = _expected_value(field.type, version, value[field.name])
        else:
            result[field.name] = absent_default(field, version)
    return result


def _expected_value(type_: Any, version: int, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(type_, tuple):
        return expected(type_, version, value)
    if isinstance(type_, Array):
        return [_expected_value(type_.item, version, item) for item in value]
    return value


def absent_default(field: Field, version: int) -> Any:
    """The documented default of a field a version does not carry (declare.py / compile.py)."""
    if field.default is not MISSING:
        return field.default
    if isinstance(field.type, Array):
        return None if version in field.nullable else []
    if isinstance(field.type, tuple) or version in field.nullable:
        return None
    return {"string": "", "bytes": b"", "records": None, "bool": False, "uuid": uuid.UUID(int=0),
            "float64": 0.0}.get(field.type, 0)


def served_versions() -> list[tuple[int, int]]:
    return [(key, version) for key, api in sorted(registry.APIS.items())
            for version in range(api.versions[0], api.versions[1] + 1)]


def _id(pair: tuple[int, int]) -> str:
    key, version = pair
    return f"{registry.APIS[key].name}-v{version}"


def request_frame(api: Api, version: int, body: bytes, correlation_id: int) -> bytes:
    header = struct.pack(">hhih", api.key, version, correlation_id, 4) + b"test"
    if api.is_flexible(version):
        header += b"\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


ROUNDTRIP_SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("pair", served_versions(), ids=_id)
@ROUNDTRIP_SETTINGS
@given(data=st.data())
def test_request_decodes_to_what_was_encoded(pair, data):
    key, version = pair
    api = registry.APIS[key]
    value = data.draw(struct_strategy(api.request, version), label="request")
    body = bytearray()
    request_codec(api, version).write(body, value)
    conn = KafkaServerConnection(registry.APIS, Limits())
    [event] = conn.receive_data(request_frame(api, version, bytes(body), correlation_id=11))
    assert isinstance(event, RequestReceived)
    assert event.header.correlation_id == 11
    assert event.body == expected(api.request, version, value)


@pytest.mark.parametrize("pair", served_versions(), ids=_id)
@ROUNDTRIP_SETTINGS
@given(data=st.data())
def test_response_decodes_to_what_was_encoded(pair, data):
    key, version = pair
    api = registry.APIS[key]
    value = data.draw(struct_strategy(api.response, version), label="response")
    framed = KafkaServerConnection.response(api, RequestHeader(key, version, 21, "test"), value)
    size, correlation_id = struct.unpack_from(">ii", framed)
    assert (size, correlation_id) == (len(framed) - 4, 21)
    flexible_header = api.is_flexible(version) and key != 18
    reader = t.Reader(framed, 8)
    if flexible_header:
        assert reader.uvarint() == 0  # no tagged fields in the response header
    assert response_codec(api, version).read(reader) == expected(api.response, version, value)
    assert reader.left() == 0


def test_every_served_api_is_covered():
    # Guards the parametrisation: it must be derived from the registry, not be empty.
    keys = {key for key, _ in served_versions()}
    assert keys == set(registry.APIS) and {0, 1, 2, 3, 18, 22} <= keys


def test_tagged_field_at_its_default_is_not_written():
    # Fetch v12's cluster_id is tagged (tag 0) and defaults to null: leaving it out costs one byte.
    fetch = registry.APIS[1]
    without, with_id = bytearray(), bytearray()
    request_codec(fetch, 12).write(without, {"topics": [], "forgotten_topics_data": [], "rack_id": ""})
    request_codec(fetch, 12).write(with_id, {"topics": [], "forgotten_topics_data": [], "rack_id": "",
                                             "cluster_id": "c"})
    assert without[-1] == 0                      # zero tagged fields
    assert with_id.endswith(b"\x01\x00\x02\x02c")  # one field: tag 0, size 2, compact string "c"

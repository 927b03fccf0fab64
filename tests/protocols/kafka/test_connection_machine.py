"""The sans-I/O Kafka connection machine: framing, limits, header rules, KIP-511, garbage (no sockets)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols.kafka import registry
from protocols.kafka.codec.compile import request_codec
from protocols.kafka.machine.connection import (KafkaServerConnection, Limits, RemoteProtocolError, RequestReceived,
                                                UnsupportedApiVersions)

API_VERSIONS_KEY, METADATA_KEY, PRODUCE_KEY = 18, 3, 0
UNUSED_API_KEY = 999
SMALL = Limits(max_frame_bytes=4096, max_frame_bytes_before_auth=256)


def request_frame(api_key: int, version: int, body: bytes = b"", *, correlation_id: int = 7,
                  client_id: str | None = "machine-test", flexible: bool | None = None) -> bytes:
    """A size-prefixed request: header v1 (v2 when the API version is flexible) and `body`."""
    if flexible is None:
        api = registry.APIS.get(api_key)
        flexible = api is not None and api.is_flexible(version)
    cid = b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id.encode())) + client_id.encode()
    payload = struct.pack(">hhi", api_key, version, correlation_id) + cid + (b"\x00" if flexible else b"") + body
    return struct.pack(">i", len(payload)) + payload


def encoded_request(api_key: int, version: int, value: dict) -> bytes:
    out = bytearray()
    request_codec(registry.APIS[api_key], version).write(out, value)
    return bytes(out)


def metadata_v1(correlation_id: int = 7, topics: list[str] | None = None) -> bytes:
    body = encoded_request(METADATA_KEY, 1, {"topics": [{"name": t} for t in topics] if topics is not None else None})
    return request_frame(METADATA_KEY, 1, body, correlation_id=correlation_id)


def machine(limits: Limits = Limits(), *, requires_auth: bool = False) -> KafkaServerConnection:
    return KafkaServerConnection(registry.APIS, limits, requires_auth=requires_auth)


# --- framing --------------------------------------------------------------------------------------


def test_complete_request_becomes_one_event_with_its_header_and_body():
    [event] = machine().receive_data(metadata_v1(correlation_id=42, topics=["a", "b"]))
    assert isinstance(event, RequestReceived)
    assert (event.api.key, event.header.api_version, event.header.correlation_id, event.header.client_id) == (
        METADATA_KEY, 1, 42, "machine-test")
    assert [t.name for t in event.body.topics] == ["a", "b"]


def test_request_split_byte_by_byte_completes_only_on_its_last_byte():
    conn = machine()
    data = metadata_v1(topics=["split"])
    for index, byte in enumerate(data[:-1]):
        assert conn.receive_data(bytes([byte])) == [], f"event before the last byte (at {index})"
    [event] = conn.receive_data(data[-1:])
    assert event.body.topics[0].name == "split"


@given(cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=40))
def test_frames_cut_anywhere_yield_the_same_events_in_order(cuts):
    data = b"".join(metadata_v1(correlation_id=i, topics=[f"t{i}"]) for i in range(5)) + request_frame(
        API_VERSIONS_KEY, 0, correlation_id=5)
    conn = machine()
    events = []
    position = 0
    for cut in sorted(set(c for c in cuts if c < len(data))) + [len(data)]:
        events += conn.receive_data(data[position:cut])
        position = cut
    assert [e.header.correlation_id for e in events] == [0, 1, 2, 3, 4, 5]


def test_several_frames_in_one_chunk_come_out_in_order():
    data = metadata_v1(correlation_id=1) + request_frame(API_VERSIONS_KEY, 3, b"\x05test\x041.0\x00", correlation_id=2)
    events = machine().receive_data(data)
    assert [(e.api.key, e.header.correlation_id) for e in events] == [(METADATA_KEY, 1), (API_VERSIONS_KEY, 2)]
    assert events[1].body.client_software_name == "test"


def test_null_client_id_is_accepted():
    [event] = machine().receive_data(request_frame(API_VERSIONS_KEY, 0, client_id=None))
    assert event.header.client_id is None


def test_eof_between_frames_closes_cleanly():
    conn = machine()
    assert conn.receive_data(b"") == []
    assert conn.closed


def test_eof_inside_a_frame_is_a_protocol_error():
    conn = machine()
    conn.receive_data(metadata_v1()[:-3])
    with pytest.raises(RemoteProtocolError, match="closed inside a frame"):
        conn.receive_data(b"")


def test_data_after_eof_is_refused():
    conn = machine()
    conn.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="after close"):
        conn.receive_data(request_frame(API_VERSIONS_KEY, 0))


# --- size limits ----------------------------------------------------------------------------------


def test_oversize_frame_is_refused_from_its_size_alone():
    # Only the 4 size bytes arrive: the machine must not wait for (or buffer) the body to refuse it.
    with pytest.raises(RemoteProtocolError, match=r"frame size 4097 outside 0\.\.4096"):
        machine(SMALL).receive_data(struct.pack(">i", 4097))


def test_frame_of_exactly_the_limit_is_buffered():
    conn = machine(SMALL)
    assert conn.receive_data(struct.pack(">i", 4096) + b"\x00" * 100) == []
    assert not conn.closed


@pytest.mark.parametrize("size", [-1, -2**31])
def test_negative_frame_size_is_a_protocol_error(size):
    with pytest.raises(RemoteProtocolError, match=f"frame size {size}"):
        machine().receive_data(struct.pack(">i", size))


def test_zero_size_frame_has_no_header_and_is_a_protocol_error():
    with pytest.raises(RemoteProtocolError, match="bad request header"):
        machine().receive_data(struct.pack(">i", 0))


def test_machine_stays_closed_after_a_protocol_error():
    conn = machine()
    with pytest.raises(RemoteProtocolError):
        conn.receive_data(struct.pack(">i", -1))
    assert conn.closed
    with pytest.raises(RemoteProtocolError, match="after close"):
        conn.receive_data(request_frame(API_VERSIONS_KEY, 0))


# --- header rules ---------------------------------------------------------------------------------


def test_unknown_api_key_is_a_protocol_error_that_carries_the_header():
    with pytest.raises(RemoteProtocolError, match=f"unknown API key {UNUSED_API_KEY}") as caught:
        machine().receive_data(request_frame(UNUSED_API_KEY, 0, correlation_id=9))
    assert caught.value.header is not None
    assert (caught.value.header.api_key, caught.value.header.correlation_id) == (UNUSED_API_KEY, 9)


def test_unknown_version_of_a_known_api_is_a_protocol_error():
    high = registry.APIS[METADATA_KEY].versions[1]
    with pytest.raises(RemoteProtocolError, match=f"Metadata v{high + 1} is not supported"):
        machine().receive_data(request_frame(METADATA_KEY, high + 1))


@pytest.mark.parametrize("version", [4, 200, -1])
def test_api_versions_at_an_unknown_version_is_answered_not_refused(version):
    # KIP-511: whatever the body, the client gets a v0 answer with UNSUPPORTED_VERSION.
    [event] = machine().receive_data(request_frame(API_VERSIONS_KEY, version, b"\x99garbage", correlation_id=3))
    assert isinstance(event, UnsupportedApiVersions)
    assert (event.header.api_version, event.header.correlation_id) == (version, 3)


def test_truncated_body_is_a_protocol_error_naming_the_api():
    body = encoded_request(METADATA_KEY, 1, {"topics": [{"name": "truncated"}]})
    with pytest.raises(RemoteProtocolError, match="Metadata v1") as caught:
        machine().receive_data(request_frame(METADATA_KEY, 1, body[:-2]))
    assert caught.value.header.api_key == METADATA_KEY


def test_bytes_left_over_after_the_body_are_ignored_as_kafka_does():
    # librdkafka 2.16 sends three extra bytes in some Metadata v11 requests; Kafka answers them.
    body = encoded_request(METADATA_KEY, 11, {"topics": None})
    [event] = machine().receive_data(request_frame(METADATA_KEY, 11, body + b"\x01\x00\x00"))
    assert event.body.topics is None


def test_array_count_larger_than_the_frame_fails_without_allocating():
    with pytest.raises(RemoteProtocolError, match="cannot fit"):
        machine().receive_data(request_frame(METADATA_KEY, 1, struct.pack(">i", 2**31 - 1)))


# --- before authentication ------------------------------------------------------------------------


def test_frame_limit_before_authentication_is_the_smaller_one():
    conn = machine(SMALL, requires_auth=True)
    assert not conn.authenticated
    with pytest.raises(RemoteProtocolError, match=r"outside 0\.\.256"):
        conn.receive_data(struct.pack(">i", 257))


def test_frame_limit_after_authentication_is_the_normal_one():
    conn = machine(SMALL, requires_auth=True)
    conn.authenticated = True
    assert conn.receive_data(struct.pack(">i", 4000)) == []


def test_api_versions_is_allowed_before_authentication():
    [event] = machine(requires_auth=True).receive_data(request_frame(API_VERSIONS_KEY, 0))
    assert event.api.key == API_VERSIONS_KEY


def test_other_apis_before_authentication_are_a_protocol_error():
    with pytest.raises(RemoteProtocolError, match="Metadata before authentication"):
        machine(requires_auth=True).receive_data(metadata_v1())


# --- garbage --------------------------------------------------------------------------------------


def framed_garbage() -> st.SearchStrategy[bytes]:
    """A well-sized frame with a served (api key, version) and a random body: reaches the decoders."""
    keys = sorted(registry.APIS)

    @st.composite
    def build(draw):
        key = draw(st.sampled_from(keys))
        low, high = registry.APIS[key].versions
        version = draw(st.integers(min_value=low, max_value=high))
        return request_frame(key, version, draw(st.binary(max_size=64)))
    return build()


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(chunks=st.lists(st.one_of(st.binary(max_size=64), framed_garbage()), max_size=8))
def test_any_bytes_give_events_or_a_protocol_error_and_nothing_else(chunks):
    conn = machine(Limits(max_frame_bytes=1 << 16))
    try:
        for chunk in chunks:
            for event in conn.receive_data(chunk):
                assert isinstance(event, (RequestReceived, UnsupportedApiVersions))
        conn.receive_data(b"")
    except RemoteProtocolError:
        assert conn.closed


def test_a_tls_client_on_the_plaintext_port_is_named_as_such():
    client_hello_start = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
    with pytest.raises(RemoteProtocolError, match="a TLS client on the plaintext port"):
        machine().receive_data(client_hello_start)

"""Whatever bytes arrive, receive_data returns events (never raises), and nothing is reported
for the connection after it decided to close it."""

from __future__ import annotations

from amqp_client_frames import PROTOCOL_HEADER, method, publish, start_ok
from amqp_connections import new_connection, with_channel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols.amqp.codec.frames import encode_frame
from protocols.amqp.machine.events import (
    ConnectionClosed, ConnectionCloseRequested, ConnectionErrorRaised, ContentReceived, Event, MethodReceived,
)
from protocols.amqp.spec import METHODS

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def feed(conn, chunks) -> list[Event]:
    events: list[Event] = []
    for chunk in chunks:
        if chunk:
            got = conn.receive_data(chunk)
            assert all(isinstance(e, Event) for e in got), got
            events += got
    return events


def assert_nothing_after_connection_error(events: list[Event]) -> None:
    for index, event in enumerate(events):
        if isinstance(event, ConnectionErrorRaised):
            later = events[index + 1:]
            assert not [e for e in later if isinstance(e, (MethodReceived, ContentReceived))], later
            assert all(isinstance(e, (ConnectionCloseRequested, ConnectionClosed)) for e in later), later


chunks = st.lists(st.binary(max_size=64), max_size=8)


@SETTINGS
@given(chunks=chunks)
def test_arbitrary_bytes_at_the_start_only_produce_events(chunks):
    feed(new_connection(), chunks)


@SETTINGS
@given(chunks=chunks)
def test_arbitrary_bytes_after_the_protocol_header_only_produce_events(chunks):
    events = feed(new_connection(), [PROTOCOL_HEADER, *chunks])
    assert_nothing_after_connection_error(events)


@SETTINGS
@given(chunks=chunks)
def test_arbitrary_bytes_on_an_open_connection_only_produce_events(chunks):
    events = feed(with_channel(1), chunks)
    assert_nothing_after_connection_error(events)


method_payloads = st.builds(lambda m, tail: m.key[0].to_bytes(2, "big") + m.key[1].to_bytes(2, "big") + tail,
                            st.sampled_from(METHODS), st.binary(max_size=40))
frames = st.builds(
    encode_frame,
    st.sampled_from([1, 1, 1, 2, 3, 8, 0, 4]),
    st.sampled_from([0, 1, 1, 2, 65535]),
    st.one_of(method_payloads, st.binary(max_size=40)),
)
valid = st.sampled_from([
    method(1, "basic.qos", prefetch_count=3), publish(1, b"abc", exchange="x"), method(2, "channel.open"),
    method(1, "channel.close", reply_code=200), method(1, "channel.close-ok"), method(0, "connection.close",
                                                                                       reply_code=200),
    method(0, "connection.close-ok"), encode_frame(8, 0, b""),
])


@SETTINGS
@given(wire=st.lists(st.one_of(frames, valid), max_size=12), cut=st.integers(0, 200))
def test_well_framed_nonsense_mixed_with_valid_frames_only_produces_events(wire, cut):
    data = b"".join(wire)
    events = feed(with_channel(1), [data[:cut], data[cut:]])
    assert_nothing_after_connection_error(events)


@SETTINGS
@given(chunks=chunks)
def test_arbitrary_bytes_during_the_handshake_only_produce_events(chunks):
    conn = new_connection()
    events = feed(conn, [PROTOCOL_HEADER + start_ok(), *chunks])
    assert_nothing_after_connection_error(events)

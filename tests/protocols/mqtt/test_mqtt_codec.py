"""The MQTT codec: every packet round-trips in every version that has it, and hostile bytes are
refused with the right reason code, bounded before anything is allocated."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.mqtt.codec import packets as pk
from protocols.mqtt.codec import primitives as p
from protocols.mqtt.codec import properties as props
from protocols.mqtt.codec.errors import MALFORMED_PACKET, PACKET_TOO_LARGE, PROTOCOL_ERROR, DecodeError
from protocols.mqtt.codec.framing import Framer

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)
binary = st.binary(max_size=40)
packet_ids = st.integers(1, 0xFFFF)
qos = st.integers(0, 2)


def _property_value(kind):
    return {props.BYTE: st.integers(0, 255), props.U16: st.integers(0, 0xFFFF), props.U32: st.integers(0, 2**32 - 1),
            props.VARINT: st.integers(1, p.VARINT_MAX), props.TEXT: text, props.BINARY: binary,
            props.PAIR: st.tuples(text, text)}[kind]


@st.composite
def properties(draw):
    chosen = draw(st.lists(st.sampled_from(props.TABLE), max_size=6, unique_by=lambda entry: entry[0]))
    out = {}
    for _, name, kind, repeats in chosen:
        value = _property_value(kind)
        out[name] = draw(st.lists(value, min_size=1, max_size=3)) if repeats else draw(value)
    return out


def versions_properties(version, draw_properties):
    return draw_properties if version == pk.V5 else {}


@st.composite
def packets(draw):
    version = draw(st.sampled_from([pk.V31, pk.V311, pk.V5]))
    extra = draw(properties()) if version == pk.V5 else {}
    kind = draw(st.sampled_from(["connect", "connack", "publish", "ack", "subscribe", "suback", "unsubscribe",
                                 "unsuback", "ping", "disconnect"]))
    if kind == "connect":
        will = draw(st.none() | st.builds(pk.Will, text.filter(bool), binary, qos, st.booleans(),
                                          st.just(extra if version == pk.V5 else {})))
        username = draw(st.none() | text)
        password = draw(st.none() | binary) if username is not None or version == pk.V5 else None
        packet = pk.Connect(version, draw(text), draw(st.booleans()), draw(st.integers(0, 0xFFFF)), username,
                            password, will, extra)
    elif kind == "connack":
        packet = pk.ConnAck(draw(st.integers(0, 255)), draw(st.booleans()), extra)
    elif kind == "publish":
        level = draw(qos)
        packet = pk.Publish(draw(text), draw(binary), level, draw(st.booleans()), draw(st.booleans()),
                            draw(packet_ids) if level else 0, extra)
    elif kind == "ack":
        code = draw(st.integers(0, 255)) if version == pk.V5 else 0
        packet = pk.PublishAck(draw(st.sampled_from(pk.PUBLISH_ACKS)), draw(packet_ids), code,
                               extra if code or version == pk.V5 and extra else {})
    elif kind == "subscribe":
        requests = draw(st.lists(st.builds(pk.SubscriptionRequest, text, qos, *(
            (st.booleans(), st.booleans(), st.integers(0, 2)) if version == pk.V5 else
            (st.just(False), st.just(False), st.just(0)))), min_size=1, max_size=4))
        packet = pk.Subscribe(draw(packet_ids), requests, extra)
    elif kind == "suback":
        packet = pk.SubAck(draw(packet_ids), draw(st.lists(st.integers(0, 255), min_size=1, max_size=4)), extra)
    elif kind == "unsubscribe":
        packet = pk.Unsubscribe(draw(packet_ids), draw(st.lists(text, min_size=1, max_size=4)), extra)
    elif kind == "unsuback":
        packet = pk.UnsubAck(draw(packet_ids), draw(st.lists(st.integers(0, 255), max_size=4)), extra) \
            if version == pk.V5 else pk.UnsubAck(draw(packet_ids))
    elif kind == "ping":
        packet = draw(st.sampled_from([pk.PingReq(), pk.PingResp()]))
    else:
        code = draw(st.integers(0, 255)) if version == pk.V5 else 0
        packet = pk.Disconnect(code, extra if version == pk.V5 and code else {})
    return version, packet


def _decode_one(data: bytes, version: int):
    frames, error = Framer(1 << 24).feed(data)
    assert error is None and len(frames) == 1
    return pk.decode(frames[0][0], frames[0][1], version)


@settings(max_examples=150, deadline=None)
@given(packets())
def test_every_packet_round_trips(case):
    version, packet = case
    data = packet.encode(version)
    assert _decode_one(data, version) == packet


@given(st.integers(0, p.VARINT_MAX))
def test_variable_byte_integers_round_trip(value):
    encoded = p.encode_varint(value)
    assert len(encoded) <= 4
    assert p.Reader(encoded).varint() == value


@pytest.mark.parametrize("data, code", [
    (b"\x30\xff\xff\xff\xff\x01", MALFORMED_PACKET),            # a fifth length byte
    (b"\x30\xff\xff\xff\x7f", PACKET_TOO_LARGE),                # 256 MB announced
])
def test_hostile_lengths_are_refused_before_the_body(data, code):
    tracemalloc.start()
    frames, error = Framer(1 << 20).feed(data)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert frames == [] and error.reason_code == code
    assert peak < 64 << 10


def test_a_packet_split_anywhere_is_put_back_together():
    data = pk.Publish("a/b", b"x" * 300, 1, packet_id=9).encode(pk.V311) * 3
    framer = Framer(1 << 20)
    frames = []
    for index in range(len(data)):
        got, error = framer.feed(data[index:index + 1])
        assert error is None
        frames += got
    assert [pk.decode(first, body, pk.V311).payload for first, body in frames] == [b"x" * 300] * 3
    assert framer.buffered == 0


def test_good_packets_before_a_bad_frame_are_still_served():
    good = pk.PingReq().encode(pk.V311)
    frames, error = Framer(1 << 20).feed(good + b"\x30\xff\xff\xff\xff\x01")
    assert len(frames) == 1 and error.reason_code == MALFORMED_PACKET


@pytest.mark.parametrize("body_hex, version, code", [
    ("0003612f62", pk.V311, None),                 # a fine PUBLISH QoS 0 (control case)
    ("0005612f62", pk.V311, MALFORMED_PACKET),     # topic length past the end
    ("0002c328", pk.V311, MALFORMED_PACKET),       # not UTF-8
    ("00026100", pk.V311, MALFORMED_PACKET),       # U+0000 in the topic
    ("0001610a2301", pk.V5, MALFORMED_PACKET),     # property length 10, 2 bytes there
    ("000161040101 0101".replace(" ", ""), pk.V5, PROTOCOL_ERROR),   # payload format given twice
    ("00016102ff00", pk.V5, MALFORMED_PACKET),     # unknown property 0xff
])
def test_malformed_publish_bodies(body_hex, version, code):
    body = bytes.fromhex(body_hex)
    if code is None:
        assert pk.decode(0x30, body, version).topic == "a/b"
        return
    with pytest.raises(DecodeError) as caught:
        pk.decode(0x30, body, version)
    assert caught.value.reason_code == code


@pytest.mark.parametrize("first_byte, body", [
    (0x36, b"\x00\x01a\x00\x01"),      # QoS 3
    (0x32, b"\x00\x01a\x00\x00"),      # packet identifier 0
    (0x80, b"\x00\x01"),               # SUBSCRIBE with flags 0 (must be 2)
    (0x82, b"\x00\x01"),               # SUBSCRIBE without a filter
    (0x82, b"\x00\x01\x00\x01a\x03"),  # subscription QoS 3
    (0x00, b""),                       # reserved type 0
    (0xc0, b"\x00"),                   # PINGREQ with a body
])
def test_malformed_packets(first_byte, body):
    with pytest.raises(DecodeError):
        pk.decode(first_byte, body, pk.V311)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200), st.sampled_from([pk.V31, pk.V311, pk.V5]))
def test_garbage_raises_only_decode_errors(data, version):
    frames, error = Framer(4096).feed(data)
    for first_byte, body in frames:
        try:
            pk.decode(first_byte, body, version)
        except (DecodeError, pk.UnsupportedProtocol):
            pass

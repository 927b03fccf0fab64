"""The running connection: channels, content assembly, errors turned into closes, sending, heartbeats."""

from __future__ import annotations

import pytest
from amqp_client_frames import body, header, method, publish, server_frames, server_method
from amqp_connections import open_connection, with_channel

from protocols.amqp.codec.frames import encode_frame
from protocols.amqp.codec.properties import BasicProperties, ContentProperties
from protocols.amqp.machine.connection import ChannelState, ConnectionState
from protocols.amqp.machine.errors import AmqpConnectionError, ChannelError, LocalProtocolError
from protocols.amqp.machine.events import (
    ChannelErrorRaised, ConnectionCloseRequested, ConnectionClosed, ConnectionErrorRaised, ConnectionLost,
    ContentReceived, HeartbeatReceived, MethodReceived,
)
from protocols.amqp.spec import ReplyCode


def connection_error(events, code: int) -> ConnectionErrorRaised:
    error = events[-1]
    assert isinstance(error, ConnectionErrorRaised), events
    assert error.reply_code == code, error
    assert server_method(error.data)[1] == "connection.close"
    return error


# --- channels ---------------------------------------------------------------------------------------

def test_channel_open_is_reported_and_answered_with_open_ok():
    conn = open_connection()
    assert conn.receive_data(method(3, "channel.open")) == [MethodReceived(3, "channel.open", {"out_of_band": ""})]
    assert server_method(conn.send_method(3, "channel.open-ok")) == (3, "channel.open-ok", {"channel_id": b""})
    assert conn.channel_state(3) is ChannelState.OPEN


def test_a_method_on_a_channel_that_was_never_opened_is_a_channel_error():
    conn = open_connection()
    error = connection_error(conn.receive_data(method(1, "queue.declare", queue="q")), ReplyCode.CHANNEL_ERROR)
    assert error.reply_text == "CHANNEL_ERROR - expected 'channel.open'" and (error.class_id, error.method_id) == (50, 10)


def test_a_second_channel_open_is_a_channel_error():
    conn = with_channel(1)
    error = connection_error(conn.receive_data(method(1, "channel.open")), ReplyCode.CHANNEL_ERROR)
    assert error.reply_text == "CHANNEL_ERROR - second 'channel.open' seen"


def test_opening_more_channels_than_channel_max_is_not_allowed():
    conn = open_connection(channel_max=2)
    conn.receive_data(method(1, "channel.open") + method(2, "channel.open"))
    error = connection_error(conn.receive_data(method(3, "channel.open")), ReplyCode.NOT_ALLOWED)
    assert "negotiated channel_max (2)" in error.reply_text


def test_a_client_channel_close_is_answered_and_frees_the_number_for_reuse():
    conn = with_channel(1)
    events = conn.receive_data(method(1, "channel.close", reply_code=200, reply_text="bye"))
    assert events == [MethodReceived(1, "channel.close", {"reply_code": 200, "reply_text": "bye", "class_id": 0,
                                                          "method_id": 0})]
    assert conn.channel_state(1) is ChannelState.PEER_CLOSING
    assert conn.receive_data(method(1, "basic.qos", prefetch_count=1)) == []     # ignored until close-ok
    assert conn.send_content(1, "basic.deliver", None, b"late", consumer_tag="c", delivery_tag=1, exchange="",
                             routing_key="q") == b""
    assert server_method(conn.send_method(1, "channel.close-ok"))[1] == "channel.close-ok"
    assert conn.channel_state(1) is None
    assert conn.receive_data(method(1, "channel.open"))[0].method_name == "channel.open"


def test_a_soft_error_from_the_broker_closes_only_the_channel_until_the_client_confirms():
    conn = with_channel(1)
    error = ChannelError(ReplyCode.NOT_FOUND, "no queue 'q' in vhost '/'", method_name="queue.declare")
    assert server_method(conn.send_error(1, error)) == (1, "channel.close", {
        "reply_code": 404, "reply_text": "NOT_FOUND - no queue 'q' in vhost '/'", "class_id": 50, "method_id": 10})
    assert conn.channel_state(1) is ChannelState.CLOSING
    assert conn.send_method(1, "basic.ack", delivery_tag=1) == b""                 # dropped, as RabbitMQ does
    assert conn.send_error(1, error) == b""                                         # already closing
    assert conn.receive_data(publish(1, b"ignored") + method(1, "basic.qos")) == []
    assert conn.receive_data(method(1, "channel.close-ok")) == [MethodReceived(1, "channel.close-ok", {})]
    assert conn.channel_state(1) is None and conn.state is ConnectionState.OPEN


def test_crossed_channel_closes_are_each_answered():
    conn = with_channel(1)
    conn.send_error(1, ChannelError(ReplyCode.PRECONDITION_FAILED, "x"))
    events = conn.receive_data(method(1, "channel.close", reply_code=200))
    assert [e.method_name for e in events] == ["channel.close"]
    assert server_method(conn.send_method(1, "channel.close-ok"))[1] == "channel.close-ok"
    assert conn.channel_state(1) is ChannelState.CLOSING          # still waiting for their close-ok
    conn.receive_data(method(1, "channel.close-ok"))
    assert conn.channel_state(1) is None


def test_a_hard_error_or_an_error_on_channel_zero_closes_the_connection():
    conn = with_channel(1)
    data = conn.send_error(1, ChannelError(ReplyCode.NOT_IMPLEMENTED, "active=false", method_name="channel.flow"))
    assert server_method(data) == (0, "connection.close", {"reply_code": 540, "reply_text":
                                   "NOT_IMPLEMENTED - active=false", "class_id": 20, "method_id": 20})
    assert conn.state is ConnectionState.CLOSING
    other = with_channel(1)
    assert server_method(other.send_error(0, ChannelError(ReplyCode.ACCESS_REFUSED, "no")))[1] == "connection.close"


def test_reply_texts_are_cut_to_the_255_bytes_a_shortstr_holds():
    conn = with_channel(1)
    data = conn.send_error(1, ChannelError(ReplyCode.NOT_FOUND, "é" * 300))
    text = server_method(data)[2]["reply_text"]
    assert text.startswith("NOT_FOUND - é") and len(text.encode()) <= 255


# --- content ----------------------------------------------------------------------------------------

PROPS = BasicProperties(content_type="application/json", headers={"k": "v"}, delivery_mode=2)


def test_a_publish_is_assembled_from_method_header_and_body_frames():
    conn = with_channel(1)
    events = conn.receive_data(publish(1, b"a" * 10000, PROPS, exchange="ex", routing_key="rk", mandatory=True))
    [event] = events
    assert isinstance(event, ContentReceived)
    assert (event.channel, event.method_name, event.body) == (1, "basic.publish", b"a" * 10000)
    assert event.args == {"ticket": 0, "exchange": "ex", "routing_key": "rk", "mandatory": True, "immediate": False}
    assert event.properties.raw == PROPS.encode() and event.properties.decoded == PROPS


def test_an_empty_body_completes_on_the_header():
    conn = with_channel(1)
    [event] = conn.receive_data(method(1, "basic.publish") + header(1, 0))
    assert isinstance(event, ContentReceived) and event.body == b""


def test_a_publish_split_at_every_byte_boundary_is_assembled_once():
    wire = publish(1, b"hello world", PROPS, frame_size=4)
    for cut in range(len(wire) + 1):
        conn = with_channel(1)
        events = [e for chunk in (wire[:cut], wire[cut:]) if chunk for e in conn.receive_data(chunk)]
        assert [e.body for e in events] == [b"hello world"], cut


def test_publishes_on_different_channels_interleave():
    conn = with_channel(1)
    conn.receive_data(method(2, "channel.open"))
    wire = (method(1, "basic.publish") + method(2, "basic.publish") + header(2, 2) + header(1, 1) + body(2, b"b")
            + body(1, b"A") + body(2, b"b"))
    events = conn.receive_data(wire)
    assert [(e.channel, e.body) for e in events] == [(1, b"A"), (2, b"bb")]


@pytest.mark.parametrize("wire", [
    header(1, 5),                                                              # header with no method
    body(1, b"x"),                                                             # body with no method
    method(1, "basic.publish") + body(1, b"x"),                                # body instead of header
    method(1, "basic.publish") + method(1, "basic.qos"),                       # method instead of header
    method(1, "basic.publish") + header(1, 5) + method(1, "basic.qos"),        # method instead of body
    method(1, "basic.publish") + header(1, 5) + header(1, 5),                  # header instead of body
    method(1, "basic.publish") + header(1, 5, class_id=50),                    # header for another class
    method(1, "basic.publish") + header(1, 5, weight=1),                       # non-zero weight
    header(2, 5),                                                              # header on a channel never opened
], ids=["header-first", "body-first", "body-for-header", "method-for-header", "method-for-body",
        "header-for-body", "wrong-class", "weight", "unopened-channel"])
def test_frames_out_of_order_are_unexpected_frame(wire):
    conn = with_channel(1)
    connection_error(conn.receive_data(wire), ReplyCode.UNEXPECTED_FRAME)
    assert conn.state is ConnectionState.CLOSING


def test_a_body_frame_larger_than_what_remains_is_a_frame_error():
    conn = with_channel(1)
    events = conn.receive_data(method(1, "basic.publish") + header(1, 3) + body(1, b"four"))
    error = connection_error(events, ReplyCode.FRAME_ERROR)
    assert (error.class_id, error.method_id, error.lost_sync) == (60, 40, False)


def test_a_body_over_the_max_message_size_is_refused_on_the_header_before_any_body_arrives():
    conn = with_channel(1, max_message_size=1000)
    [event] = conn.receive_data(method(1, "basic.publish") + header(1, 1001))
    assert isinstance(event, ChannelErrorRaised)
    assert (event.channel, event.reply_code, event.class_id, event.method_id) == (1, 406, 60, 40)
    assert event.reply_text == "PRECONDITION_FAILED - message size 1001 is larger than configured max size 1000"
    assert server_method(event.data)[:2] == (1, "channel.close")
    # the body the client was already sending is dropped frame by frame, never buffered
    assert conn.receive_data(body(1, b"x" * 1001)) == []
    assert conn.receive_data(method(1, "channel.close-ok")) == [MethodReceived(1, "channel.close-ok", {})]
    assert conn.state is ConnectionState.OPEN


def test_a_body_over_the_absolute_ceiling_is_a_frame_error():
    conn = with_channel(1, max_message_size=2**40)
    connection_error(conn.receive_data(method(1, "basic.publish") + header(1, 2**30)), ReplyCode.FRAME_ERROR)


# --- what the client may send -----------------------------------------------------------------------

@pytest.mark.parametrize("name, args", [
    ("basic.deliver", {"consumer_tag": "c", "delivery_tag": 1, "exchange": "", "routing_key": "q"}),
    ("basic.get-empty", {}), ("queue.declare-ok", {"queue": "q", "message_count": 0, "consumer_count": 0}),
    ("basic.cancel-ok", {"consumer_tag": "c"}), ("connection.blocked", {}), ("connection.tune-ok", {}),
])
def test_a_method_the_client_may_not_send_on_a_channel_is_command_invalid(name, args):
    conn = with_channel(1)
    error = connection_error(conn.receive_data(method(1, name, **args)), ReplyCode.COMMAND_INVALID)
    assert error.reply_text == "COMMAND_INVALID - unimplemented method"


def test_a_channel_method_on_channel_zero_is_a_channel_error():
    conn = open_connection()
    error = connection_error(conn.receive_data(method(0, "basic.qos")), ReplyCode.CHANNEL_ERROR)
    assert error.reply_text == "CHANNEL_ERROR - unexpected method in connection state running"


def test_an_unknown_method_id_is_not_implemented():
    conn = with_channel(1)
    error = connection_error(conn.receive_data(encode_frame(1, 1, b"\x00\x3c\x00\x63")), ReplyCode.NOT_IMPLEMENTED)
    assert (error.class_id, error.method_id) == (60, 99)


def test_a_malformed_method_is_a_frame_error_without_losing_sync():
    conn = with_channel(1)
    error = connection_error(conn.receive_data(encode_frame(1, 1, b"\x00\x3c\x00\x0a\x00")), ReplyCode.FRAME_ERROR)
    assert not error.lost_sync


def test_an_unknown_frame_type_is_a_frame_error():
    conn = with_channel(1)
    connection_error(conn.receive_data(encode_frame(4, 1, b"")), ReplyCode.FRAME_ERROR)


def test_heartbeats_belong_on_channel_zero_with_no_payload():
    conn = with_channel(1)
    assert conn.receive_data(encode_frame(8, 0, b"")) == [HeartbeatReceived()]
    connection_error(conn.receive_data(encode_frame(8, 1, b"")), ReplyCode.UNEXPECTED_FRAME)
    other = with_channel(1)
    connection_error(other.receive_data(encode_frame(8, 0, b"x")), ReplyCode.FRAME_ERROR)


def test_update_secret_is_passed_to_the_caller():
    conn = open_connection()
    [event] = conn.receive_data(method(0, "connection.update-secret", new_secret=b"tok", reason="refresh"))
    assert (event.channel, event.method_name, event.args["new_secret"]) == (0, "connection.update-secret", b"tok")


def test_events_before_an_error_in_the_same_chunk_are_kept_in_order():
    conn = with_channel(1)
    events = conn.receive_data(method(1, "basic.qos", prefetch_count=5) + body(1, b"x") + method(1, "basic.qos"))
    assert isinstance(events[0], MethodReceived) and events[0].args["prefetch_count"] == 5
    connection_error(events, ReplyCode.UNEXPECTED_FRAME)
    assert len(events) == 2


# --- connection close -------------------------------------------------------------------------------

def test_a_client_connection_close_is_answered_with_close_ok_and_nothing_else_goes_out():
    conn = with_channel(1)
    [event] = conn.receive_data(method(0, "connection.close", reply_code=200, reply_text="Normal shutdown"))
    assert event == ConnectionCloseRequested(200, "Normal shutdown", 0, 0)
    assert conn.send_method(1, "basic.ack", delivery_tag=1) == b""
    assert conn.receive_data(method(1, "basic.qos")) == []
    assert server_method(conn.send_method(0, "connection.close-ok"))[1] == "connection.close-ok"
    assert conn.terminated


def test_after_our_connection_close_only_close_ok_or_a_crossing_close_count():
    conn = with_channel(1)
    conn.send_error(0, AmqpConnectionError(ReplyCode.CONNECTION_FORCED, "broker shutdown"))
    assert conn.receive_data(publish(1, b"x") + header(7, 1) + encode_frame(8, 5, b"")) == []
    assert conn.send_method(1, "basic.ack", delivery_tag=1) == b""
    assert conn.receive_data(method(0, "connection.close-ok")) == [ConnectionClosed()]
    assert conn.terminated
    assert conn.receive_data(b"") == [ConnectionLost(clean=True)]


def test_crossed_connection_closes_are_answered_and_end_the_connection():
    conn = with_channel(1)
    conn.send_error(0, AmqpConnectionError(ReplyCode.CONNECTION_FORCED, "bye"))
    [event] = conn.receive_data(method(0, "connection.close", reply_code=200))
    assert isinstance(event, ConnectionCloseRequested)
    assert server_method(conn.send_method(0, "connection.close-ok"))[1] == "connection.close-ok"
    assert conn.terminated


def test_close_ok_is_only_sent_when_a_close_is_being_answered():
    conn = with_channel(1)
    assert conn.send_method(0, "connection.close-ok") == b""
    assert conn.send_method(1, "channel.close-ok") == b""


def test_eof_is_reported_and_further_input_is_a_local_protocol_error():
    conn = with_channel(1)
    assert conn.receive_data(b"") == [ConnectionLost(clean=False)]
    assert conn.terminated
    with pytest.raises(LocalProtocolError, match="after EOF"):
        conn.receive_data(b"x")


def test_eof_after_the_close_handshake_is_clean():
    conn = with_channel(1)
    conn.receive_data(method(0, "connection.close", reply_code=200))
    conn.send_method(0, "connection.close-ok")
    assert conn.receive_data(b"") == [ConnectionLost(clean=True)]


# --- sending ----------------------------------------------------------------------------------------

def test_content_is_sent_as_method_header_and_bodies_of_at_most_frame_max_minus_8():
    conn = with_channel(1, frame_max=4096)
    data = conn.send_content(1, "basic.deliver", PROPS, b"z" * 10000, consumer_tag="ctag", delivery_tag=7,
                             exchange="", routing_key="q")
    frames = server_frames(data)
    assert frames[0] == (1, "basic.deliver", {"consumer_tag": "ctag", "delivery_tag": 7, "redelivered": False,
                                              "exchange": "", "routing_key": "q"})
    content_header = frames[1][2]
    assert (content_header.class_id, content_header.body_size) == (60, 10000)
    assert content_header.properties.decoded == PROPS
    assert [len(f[2]) for f in frames[2:]] == [4088, 4088, 1824]


def test_raw_properties_are_passed_through_byte_for_byte():
    conn = with_channel(1)
    raw = ContentProperties(b"\x80\x00\x04weird")   # never decoded on the way through
    data = conn.send_content(1, "basic.get-ok", raw, b"", delivery_tag=1, exchange="", routing_key="q",
                             message_count=0)
    frames = server_frames(data)
    assert frames[1][2].properties.raw == b"\x80\x00\x04weird" and len(frames) == 2


def test_send_helpers_refuse_misuse():
    conn = with_channel(1)
    with pytest.raises(LocalProtocolError, match="no such method"):
        conn.send_method(1, "basic.frobnicate")
    with pytest.raises(LocalProtocolError, match="not sent by servers"):
        conn.send_method(1, "basic.publish")
    with pytest.raises(LocalProtocolError, match="use send_content"):
        conn.send_method(1, "basic.deliver", consumer_tag="c", delivery_tag=1, exchange="", routing_key="q")
    with pytest.raises(LocalProtocolError, match="use send_method"):
        conn.send_content(1, "basic.ack", None, b"")
    with pytest.raises(LocalProtocolError, match="handshake has its own helpers"):
        conn.send_method(0, "connection.tune")
    with pytest.raises(TypeError, match="needs argument"):
        conn.send_method(1, "basic.consume-ok")


def test_sending_on_a_channel_that_is_not_open_is_dropped():
    conn = open_connection()
    assert conn.send_method(9, "basic.ack", delivery_tag=1) == b""


def test_connection_blocked_goes_out_on_channel_zero():
    conn = open_connection()
    assert server_method(conn.send_method(0, "connection.blocked", reason="low on memory")) == (
        0, "connection.blocked", {"reason": "low on memory"})


# --- heartbeats -------------------------------------------------------------------------------------

def test_a_heartbeat_is_due_after_half_an_interval_without_sending():
    conn = open_connection(heartbeat=10)
    conn.mark_sent(100.0)
    assert not conn.needs_heartbeat(104.9)
    assert conn.needs_heartbeat(105.0)
    assert conn.send_heartbeat() == b"\x08\x00\x00\x00\x00\x00\x00\xce"


def test_the_peer_is_dead_after_two_intervals_without_any_data():
    conn = open_connection(heartbeat=10)
    conn.receive_data(encode_frame(8, 0, b""), now=50.0)
    assert not conn.peer_is_dead(69.9)
    assert conn.peer_is_dead(70.0)
    conn.receive_data(method(1, "channel.open"), now=69.0)     # any data counts, not only heartbeats
    assert not conn.peer_is_dead(70.0)


def test_heartbeat_zero_turns_both_checks_off():
    conn = open_connection(heartbeat=0)
    conn.mark_received(0.0)
    assert not conn.needs_heartbeat(10**6) and not conn.peer_is_dead(10**6)

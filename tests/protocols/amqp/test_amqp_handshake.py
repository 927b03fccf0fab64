"""The server side of the handshake: header, start/start-ok with PLAIN and AMQPLAIN, tune, open."""

from __future__ import annotations

import pytest
from amqp_client_frames import (
    PROTOCOL_HEADER, amqplain_response, body, method, open_vhost, plain_response, server_method, start_ok, tune_ok,
)
from amqp_connections import CAPABILITIES, new_connection

from protocols.amqp.machine.connection import AmqpServerConnection, ConnectionState
from protocols.amqp.machine.errors import LocalProtocolError
from protocols.amqp.machine.events import (
    AuthenticationRequested, ConnectionClosed, ConnectionErrorRaised, ConnectionTuned, ProtocolHeaderAccepted,
    ProtocolHeaderRejected, VhostOpenRequested,
)
from protocols.amqp.spec import ReplyCode


def only(events, kind):
    assert len(events) == 1 and isinstance(events[0], kind), events
    return events[0]


def connection_error(events) -> ConnectionErrorRaised:
    error = events[-1]
    assert isinstance(error, ConnectionErrorRaised), events
    assert server_method(error.data) == (0, "connection.close", {
        "reply_code": error.reply_code, "reply_text": error.reply_text, "class_id": error.class_id,
        "method_id": error.method_id})
    return error


def authenticated(conn: AmqpServerConnection, mechanism: str = "PLAIN") -> None:
    conn.receive_data(PROTOCOL_HEADER + start_ok(mechanism))
    conn.accept_authentication()


@pytest.mark.parametrize("mechanism, response", [("PLAIN", plain_response("alice", "s3cret")),
                                                 ("AMQPLAIN", amqplain_response("alice", "s3cret"))])
def test_handshake_happy_path_reports_credentials_tuning_and_vhost(mechanism, response):
    conn = new_connection(channel_max=100, frame_max=65536, heartbeat=30)
    start = only(conn.receive_data(PROTOCOL_HEADER), ProtocolHeaderAccepted)
    channel, name, args = server_method(start.data)
    assert (channel, name, args["version_major"], args["version_minor"]) == (0, "connection.start", 0, 9)
    assert args["mechanisms"] == b"PLAIN AMQPLAIN" and args["locales"] == b"en_US"
    assert args["server_properties"]["capabilities"] == CAPABILITIES
    assert {"product", "version", "platform"} <= set(args["server_properties"])

    auth = only(conn.receive_data(start_ok(mechanism, response)), AuthenticationRequested)
    assert (auth.mechanism, auth.username, auth.password) == (mechanism, "alice", "s3cret")
    assert auth.client_properties["product"] == "test-client"
    assert conn.client_capabilities["authentication_failure_close"] is True

    assert server_method(conn.accept_authentication()) == (
        0, "connection.tune", {"channel_max": 100, "frame_max": 65536, "heartbeat": 30})
    tuned = only(conn.receive_data(tune_ok(channel_max=50, frame_max=32768, heartbeat=10)), ConnectionTuned)
    assert (tuned.channel_max, tuned.frame_max, tuned.heartbeat) == (50, 32768, 10)
    assert (conn.channel_max, conn.frame_max, conn.heartbeat_interval) == (50, 32768, 10)

    assert only(conn.receive_data(open_vhost("/prod")), VhostOpenRequested).vhost == "/prod"
    assert server_method(conn.accept_vhost()) == (0, "connection.open-ok", {"known_hosts": ""})
    assert conn.state is ConnectionState.OPEN and (conn.vhost, conn.username) == ("/prod", "alice")


def test_the_whole_client_side_of_a_handshake_can_arrive_in_one_chunk_after_each_answer():
    conn = new_connection()
    events = conn.receive_data(PROTOCOL_HEADER + start_ok())
    assert [type(e) for e in events] == [ProtocolHeaderAccepted, AuthenticationRequested]
    conn.accept_authentication()
    events = conn.receive_data(tune_ok() + open_vhost())
    assert [type(e) for e in events] == [ConnectionTuned, VhostOpenRequested]


def test_a_pipelined_handshake_pauses_at_each_decision_and_resumes_with_next_events():
    conn = new_connection()
    wire = PROTOCOL_HEADER + start_ok() + tune_ok() + open_vhost() + method(1, "channel.open")
    assert [type(e) for e in conn.receive_data(wire)] == [ProtocolHeaderAccepted, AuthenticationRequested]
    assert conn.next_events() == []      # still waiting for the decision
    conn.accept_authentication()
    assert [type(e) for e in conn.next_events()] == [ConnectionTuned, VhostOpenRequested]
    conn.accept_vhost()
    [opened] = conn.next_events()
    assert (opened.channel, opened.method_name) == (1, "channel.open")


def test_a_client_flooding_while_its_credentials_are_checked_is_cut_off():
    conn = new_connection()
    conn.receive_data(PROTOCOL_HEADER + start_ok())
    error = connection_error(conn.receive_data(b"\x08" * 70_000))
    assert error.reply_code == ReplyCode.COMMAND_INVALID and "before the handshake was answered" in error.reply_text


def test_the_protocol_header_may_arrive_a_byte_at_a_time():
    conn = new_connection()
    for byte in PROTOCOL_HEADER[:-1]:
        assert conn.receive_data(bytes([byte])) == []
    only(conn.receive_data(PROTOCOL_HEADER[-1:]), ProtocolHeaderAccepted)


@pytest.mark.parametrize("header", [b"AMQP\x00\x00\x09\x00", b"AMQP\x01\x01\x00\x09", b"AMQP\x00\x01\x00\x00",
                                    b"GET / HTTP/1.1\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01"])
def test_a_wrong_protocol_header_gets_ours_back_and_the_connection_ends(header):
    conn = new_connection()
    rejected = only(conn.receive_data(header), ProtocolHeaderRejected)
    assert rejected.received == header[:8] and rejected.data == b"AMQP\x00\x00\x09\x01"
    assert conn.terminated
    assert conn.receive_data(b"more") == []


def test_a_mechanism_we_did_not_offer_is_command_invalid():
    conn = new_connection()
    events = conn.receive_data(PROTOCOL_HEADER + start_ok("EXTERNAL", b""))
    error = connection_error(events)
    assert (error.reply_code, error.class_id, error.method_id) == (ReplyCode.COMMAND_INVALID, 10, 11)
    assert error.reply_text == "COMMAND_INVALID - unknown authentication mechanism 'EXTERNAL'"


@pytest.mark.parametrize("mechanism, response", [
    ("PLAIN", b"guest\0guest"), ("PLAIN", b"\0guest"), ("PLAIN", b"\0a\0b\0c"), ("PLAIN", b"authz\0a\0b"),
    ("AMQPLAIN", amqplain_response("guest", "x")[:-1]), ("AMQPLAIN", b"\x05LOGINS\x00\x00\x00\x01a"),
    ("AMQPLAIN", b"\x05LOGINI\x00\x00\x00\x01\x08PASSWORDI\x00\x00\x00\x01"),
])
def test_a_malformed_sasl_response_is_a_syntax_error(mechanism, response):
    conn = new_connection()
    error = connection_error(conn.receive_data(PROTOCOL_HEADER + start_ok(mechanism, response)))
    assert error.reply_code == ReplyCode.SYNTAX_ERROR


def test_refused_credentials_get_access_refused_when_the_client_can_take_it():
    conn = new_connection()
    conn.receive_data(PROTOCOL_HEADER + start_ok())
    assert server_method(conn.refuse_authentication()) == (0, "connection.close", {
        "reply_code": 403, "class_id": 0, "method_id": 0,
        "reply_text": "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
                      "For details see the broker logfile."})
    assert conn.terminated


def test_refused_credentials_just_end_the_connection_for_clients_without_the_capability():
    conn = new_connection()
    conn.receive_data(PROTOCOL_HEADER + start_ok(capabilities={}))
    assert conn.refuse_authentication() == b""
    assert conn.terminated


@pytest.mark.parametrize("capabilities", [None, {}])
def test_credentials_that_cannot_be_checked_now_get_connection_forced_whatever_the_capabilities(capabilities):
    conn = new_connection()
    conn.receive_data(PROTOCOL_HEADER + (start_ok() if capabilities is None else start_ok(capabilities=capabilities)))
    assert server_method(conn.defer_authentication("retry later")) == (0, "connection.close", {
        "reply_code": 320, "class_id": 0, "method_id": 0, "reply_text": "CONNECTION_FORCED - retry later"})
    assert conn.terminated


def test_handshake_decisions_out_of_turn_are_local_protocol_errors():
    conn = new_connection()
    with pytest.raises(LocalProtocolError, match="accept_authentication in connection state awaiting_header"):
        conn.accept_authentication()
    conn.receive_data(PROTOCOL_HEADER + start_ok())
    with pytest.raises(LocalProtocolError, match="accept_vhost in handshake state securing"):
        conn.accept_vhost()


@pytest.mark.parametrize("tune, text", [
    ({"frame_max": 4095}, "negotiated frame_max = 4095 is lower than the minimum allowed value (4096)"),
    ({"frame_max": 131073}, "negotiated frame_max = 131073 is higher than the maximum allowed value (131072)"),
    ({"frame_max": 0}, "negotiated frame_max = 0 (no limit) is higher than the maximum allowed value (131072)"),
    ({"channel_max": 2048}, "negotiated channel_max = 2048 is higher than the maximum allowed value (2047)"),
    ({"channel_max": 0}, "negotiated channel_max = 0 (no limit) is higher than the maximum allowed value (2047)"),
])
def test_tune_ok_outside_the_servers_limits_is_not_allowed(tune, text):
    conn = new_connection()
    authenticated(conn)
    error = connection_error(conn.receive_data(tune_ok(**tune)))
    assert (error.reply_code, error.class_id, error.method_id) == (ReplyCode.NOT_ALLOWED, 10, 31)
    assert error.reply_text == "NOT_ALLOWED - " + text


def test_tune_ok_may_lower_the_limits_and_choose_any_heartbeat():
    conn = new_connection()
    authenticated(conn)
    tuned = only(conn.receive_data(tune_ok(channel_max=1, frame_max=4096, heartbeat=600)), ConnectionTuned)
    assert (tuned.channel_max, tuned.frame_max, tuned.heartbeat) == (1, 4096, 600)


def test_a_frame_over_4096_bytes_before_tune_ok_is_a_frame_error_from_its_header_alone():
    conn = new_connection()
    conn.receive_data(PROTOCOL_HEADER)
    events = conn.receive_data(b"\x01\x00\x00" + (5000).to_bytes(4, "big"))
    error = connection_error(events)
    assert error.reply_code == ReplyCode.FRAME_ERROR and error.lost_sync
    assert "over the negotiated frame_max 4096" in error.reply_text
    assert conn.terminated


def test_after_tune_ok_the_negotiated_frame_max_is_the_limit():
    conn = new_connection()
    authenticated(conn)
    conn.receive_data(tune_ok(frame_max=8192) + open_vhost())
    conn.accept_vhost()
    conn.receive_data(method(1, "channel.open"))
    events = conn.receive_data(body(1, b"x" * 8193)[:7])
    error = connection_error(events)
    assert error.reply_code == ReplyCode.FRAME_ERROR and "frame_max 8192" in error.reply_text


def test_a_method_out_of_handshake_order_is_a_channel_error():
    conn = new_connection()
    authenticated(conn)
    error = connection_error(conn.receive_data(open_vhost()))
    assert (error.reply_code, error.class_id, error.method_id) == (ReplyCode.CHANNEL_ERROR, 10, 40)
    assert error.reply_text == "CHANNEL_ERROR - unexpected method in connection state tuning"


def test_a_channel_frame_before_open_ok_is_an_unexpected_frame():
    conn = new_connection()
    authenticated(conn)
    error = connection_error(conn.receive_data(tune_ok() + method(1, "channel.open")))
    assert error.reply_code == ReplyCode.UNEXPECTED_FRAME


def test_a_refused_vhost_is_not_allowed_and_the_close_handshake_finishes_it():
    conn = new_connection()
    authenticated(conn)
    conn.receive_data(tune_ok() + open_vhost("/secret"))
    assert server_method(conn.refuse_vhost()) == (0, "connection.close", {
        "reply_code": 530, "class_id": 10, "method_id": 40,
        "reply_text": "NOT_ALLOWED - access to vhost '/secret' refused for user 'guest'"})
    assert conn.state is ConnectionState.CLOSING
    only(conn.receive_data(method(0, "connection.close-ok")), ConnectionClosed)
    assert conn.terminated


def test_external_carries_no_credentials_and_the_caller_names_the_user():
    conn = new_connection(mechanisms=("EXTERNAL", "PLAIN", "AMQPLAIN"))
    start = only(conn.receive_data(PROTOCOL_HEADER), ProtocolHeaderAccepted)
    assert server_method(start.data)[2]["mechanisms"] == b"EXTERNAL PLAIN AMQPLAIN"
    # The response (an optional authorization identity) is ignored, as RabbitMQ ignores it
    auth = only(conn.receive_data(start_ok("EXTERNAL", b"someone-else")), AuthenticationRequested)
    assert (auth.mechanism, auth.username, auth.password) == ("EXTERNAL", "", "")
    conn.accept_authentication("alice")
    conn.receive_data(tune_ok() + open_vhost("/"))
    conn.accept_vhost()
    assert conn.username == "alice"


def test_external_is_refused_where_it_was_not_offered():
    conn = new_connection()
    error = connection_error(conn.receive_data(PROTOCOL_HEADER + start_ok("EXTERNAL", b"")))
    assert error.reply_code == ReplyCode.COMMAND_INVALID

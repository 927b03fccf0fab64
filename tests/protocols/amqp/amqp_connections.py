"""Machines in a known state for the tests: fresh, or with the handshake done, or with a channel open."""

from __future__ import annotations

from amqp_client_frames import PROTOCOL_HEADER, method, open_vhost, start_ok, tune_ok

from protocols.amqp.machine.connection import AmqpServerConnection
from protocols.amqp.machine.settings import ServerSettings

CAPABILITIES = {"publisher_confirms": True, "basic.nack": True, "consumer_cancel_notify": True,
                "exchange_exchange_bindings": True, "connection.blocked": True,
                "authentication_failure_close": True, "per_consumer_qos": True}


def new_connection(**settings) -> AmqpServerConnection:
    return AmqpServerConnection(ServerSettings(capabilities=CAPABILITIES, **settings))


def open_connection(frame_max: int = 131072, heartbeat: int = 60, channel_max: int = 2047,
                    **settings) -> AmqpServerConnection:
    conn = new_connection(**settings)
    conn.receive_data(PROTOCOL_HEADER + start_ok())
    conn.accept_authentication()
    conn.receive_data(tune_ok(frame_max=frame_max, heartbeat=heartbeat, channel_max=channel_max) + open_vhost())
    conn.accept_vhost()
    return conn


def with_channel(channel: int = 1, **kwargs) -> AmqpServerConnection:
    conn = open_connection(**kwargs)
    conn.receive_data(method(channel, "channel.open"))
    conn.send_method(channel, "channel.open-ok")
    return conn

"""What a client puts on the wire, built with the codec (it is symmetric), for the machine tests."""

from __future__ import annotations

from typing import Any

from protocols.amqp.codec.field_table import put_table_body
from protocols.amqp.codec.frames import encode_frame
from protocols.amqp.codec.methods import encode_method
from protocols.amqp.codec.properties import BasicProperties, encode_content_header
from protocols.amqp.spec import FRAME_BODY, FRAME_HEADER, FRAME_METHOD, PROTOCOL_HEADER

CLIENT_CAPABILITIES = {"authentication_failure_close": True, "basic.nack": True, "publisher_confirms": True}


def method(channel: int, name: str, **args: Any) -> bytes:
    return encode_frame(FRAME_METHOD, channel, encode_method(name, args))


def header(channel: int, body_size: int, properties: BasicProperties | None = None, class_id: int = 60,
           weight: int = 0) -> bytes:
    payload = bytearray(encode_content_header(body_size, properties or BasicProperties(), class_id))
    payload[2:4] = weight.to_bytes(2, "big")
    return encode_frame(FRAME_HEADER, channel, bytes(payload))


def body(channel: int, data: bytes) -> bytes:
    return encode_frame(FRAME_BODY, channel, data)


def publish(channel: int, data: bytes, properties: BasicProperties | None = None, frame_size: int = 4088,
            **args: Any) -> bytes:
    frames = [method(channel, "basic.publish", **args), header(channel, len(data), properties)]
    frames += [body(channel, data[i:i + frame_size]) for i in range(0, len(data), frame_size)]
    return b"".join(frames)


def plain_response(username: str, password: str) -> bytes:
    return b"\0" + username.encode() + b"\0" + password.encode()


def amqplain_response(username: str, password: str) -> bytes:
    out = bytearray()
    put_table_body(out, {"LOGIN": username, "PASSWORD": password})
    return bytes(out)


def start_ok(mechanism: str = "PLAIN", response: bytes | None = None, capabilities: dict | None = None) -> bytes:
    if response is None:
        response = plain_response("guest", "guest") if mechanism == "PLAIN" else amqplain_response("guest", "guest")
    properties = {"product": "test-client", "capabilities": CLIENT_CAPABILITIES if capabilities is None else capabilities}
    return method(0, "connection.start-ok", client_properties=properties, mechanism=mechanism, response=response)


def tune_ok(channel_max: int = 2047, frame_max: int = 131072, heartbeat: int = 60) -> bytes:
    return method(0, "connection.tune-ok", channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat)


def open_vhost(vhost: str = "/") -> bytes:
    return method(0, "connection.open", virtual_host=vhost)


__all__ = ["PROTOCOL_HEADER", "method", "header", "body", "publish", "start_ok", "tune_ok", "open_vhost",
           "plain_response", "amqplain_response"]


def server_frames(data: bytes) -> list[tuple[int, str, dict] | tuple[int, str, object]]:
    """What the server wrote, decoded: (channel, method name, args) for methods,
    (channel, "header", ContentHeader), (channel, "body", bytes), (0, "heartbeat", None)."""
    from protocols.amqp.codec.frames import FrameReader
    from protocols.amqp.codec.methods import decode_method
    from protocols.amqp.codec.properties import decode_content_header

    reader = FrameReader(frame_max=0)
    reader.feed(data)
    out: list = []
    for frame in reader.frames():
        if frame.type == FRAME_METHOD:
            declared, args = decode_method(frame.payload)
            out.append((frame.channel, declared.name, args))
        elif frame.type == FRAME_HEADER:
            out.append((frame.channel, "header", decode_content_header(frame.payload)))
        elif frame.type == FRAME_BODY:
            out.append((frame.channel, "body", frame.payload))
        else:
            out.append((frame.channel, "heartbeat", None))
    assert reader.buffered == 0
    return out


def server_method(data: bytes) -> tuple[int, str, dict]:
    """The single method frame the server wrote."""
    frames = server_frames(data)
    assert len(frames) == 1, frames
    return frames[0]  # type: ignore[return-value]

"""One channel's content assembly: a content-bearing method, then its content header, then body
frames until the declared body size is reached (RabbitMQ's rabbit_command_assembler rules).

- A header or body frame when a method is expected, a method or body frame when the header is
  expected, a header for another class or with a non-zero weight, a method or header frame while
  body is outstanding: UNEXPECTED_FRAME (connection error).
- A body frame larger than what remains of the declared size: FRAME_ERROR (connection error).
- A declared body size over the caller's max message size: PRECONDITION_FAILED (channel error),
  raised on the header, before any body is accepted; over the absolute ceiling: FRAME_ERROR.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from protocols.amqp.codec.properties import ContentProperties, decode_content_header
from protocols.amqp.machine.errors import AmqpConnectionError, ChannelError
from protocols.amqp.machine.settings import ABSOLUTE_MAX_MESSAGE_SIZE
from protocols.amqp.spec import Method, ReplyCode


@dataclass(slots=True)
class AssembledContent:
    method: Method
    args: Mapping[str, Any]
    properties: ContentProperties
    body: bytes


class ContentAssembler:
    def __init__(self, max_message_size: int) -> None:
        self.max_message_size = min(max_message_size, ABSOLUTE_MAX_MESSAGE_SIZE)
        self._method: Method | None = None
        self._args: Mapping[str, Any] = {}
        self._properties: ContentProperties | None = None   # None: the header is still to come
        self._remaining = 0
        self._parts: list[bytes] = []

    @property
    def expecting_method(self) -> bool:
        return self._method is None

    def reset(self) -> None:
        self._method, self._args, self._properties, self._parts = None, {}, None, []

    def check_method_frame(self) -> None:
        """A method frame is arriving: fine only between messages."""
        if self._method is not None:
            what = "content header" if self._properties is None else "content body"
            raise self._unexpected(f"expected {what}, got a method frame instead")

    def start(self, method: Method, args: Mapping[str, Any]) -> None:
        self.check_method_frame()
        self._method, self._args = method, args

    def header(self, payload: bytes) -> AssembledContent | None:
        method = self._method
        if method is None:
            raise AmqpConnectionError(ReplyCode.UNEXPECTED_FRAME, "expected method frame, got a content header")
        if self._properties is not None:
            raise self._unexpected("expected content body, got a content header instead")
        header = decode_content_header(payload)
        if header.class_id != method.class_id or header.weight != 0:
            raise self._unexpected(f"expected content header for class {method.class_id} with weight 0, "
                                   f"got class {header.class_id} weight {header.weight}")
        if header.body_size > ABSOLUTE_MAX_MESSAGE_SIZE:
            raise AmqpConnectionError(ReplyCode.FRAME_ERROR, f"content body size {header.body_size} exceeds "
                                      f"maximum allowed size {ABSOLUTE_MAX_MESSAGE_SIZE}", *method.key)
        if header.body_size > self.max_message_size:
            self.reset()
            raise ChannelError(ReplyCode.PRECONDITION_FAILED, f"message size {header.body_size} is larger "
                               f"than configured max size {self.max_message_size}", *method.key)
        self._properties = header.properties
        self._remaining = header.body_size
        return self._complete() if header.body_size == 0 else None

    def body(self, payload: bytes) -> AssembledContent | None:
        method = self._method
        if method is None:
            raise AmqpConnectionError(ReplyCode.UNEXPECTED_FRAME, "expected method frame, got a content body")
        if self._properties is None:
            raise self._unexpected("expected content header, got a content body instead")
        if len(payload) > self._remaining:
            raise AmqpConnectionError(ReplyCode.FRAME_ERROR, f"content body frame of {len(payload)} bytes "
                                      f"exceeds the remaining content size {self._remaining}", *method.key)
        self._parts.append(payload)
        self._remaining -= len(payload)
        return self._complete() if self._remaining == 0 else None

    def _complete(self) -> AssembledContent:
        assert self._method is not None and self._properties is not None
        parts = self._parts
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        content = AssembledContent(self._method, self._args, self._properties, body)
        self.reset()
        return content

    def _unexpected(self, explanation: str) -> AmqpConnectionError:
        class_id, method_id = self._method.key if self._method is not None else (0, 0)
        return AmqpConnectionError(ReplyCode.UNEXPECTED_FRAME, explanation, class_id, method_id)

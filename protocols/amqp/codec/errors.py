"""The one exception every AMQP decode failure raises."""

from __future__ import annotations

from protocols.amqp.spec import ReplyCode


class DecodeError(Exception):
    """Bytes that are not valid AMQP 0-9-1. `reply_code` is what the connection is closed with:
    FRAME_ERROR for broken framing or a field that runs past its frame (RabbitMQ's choice for any
    method that does not parse), SYNTAX_ERROR for well-framed values that make no sense (an unknown
    field-table type, tables nested too deep, a malformed SASL response)."""

    def __init__(self, reply_code: ReplyCode, message: str) -> None:
        super().__init__(message)
        self.reply_code = reply_code


def frame_error(message: str) -> DecodeError:
    return DecodeError(ReplyCode.FRAME_ERROR, message)


def syntax_error(message: str) -> DecodeError:
    return DecodeError(ReplyCode.SYNTAX_ERROR, message)

"""The errors that close a channel or a connection, and the one for misusing the machine.

Raise `ChannelError` or `AmqpConnectionError` from broker code and hand it to
`AmqpServerConnection.send_error(channel, error)`: a soft code on a channel > 0 becomes channel.close,
anything else (a hard code, channel 0, or an AmqpConnectionError) becomes connection.close, as
RabbitMQ maps its exceptions. The reply text is RabbitMQ's "NOT_FOUND - <explanation>", cut to the
255 bytes a shortstr holds. (Not named ConnectionError: that would shadow the builtin that socket
errors derive from.)
"""

from __future__ import annotations

from protocols.amqp.spec import ReplyCode, method

REPLY_TEXT_MAX = 255


class AmqpError(Exception):
    """An AMQP exception: reply code, explanation, and the method that caused it (0, 0 for none)."""

    def __init__(self, reply_code: int, explanation: str, class_id: int = 0, method_id: int = 0, *,
                 method_name: str | None = None) -> None:
        super().__init__(explanation)
        self.reply_code = ReplyCode(reply_code)
        self.explanation = explanation
        if method_name is not None:
            class_id, method_id = method(method_name).key
        self.class_id = class_id
        self.method_id = method_id

    @property
    def reply_text(self) -> str:
        return truncate_reply_text(f"{self.reply_code.name} - {self.explanation}")

    @property
    def closes_connection(self) -> bool:
        return isinstance(self, AmqpConnectionError) or not self.reply_code.is_soft

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.reply_code.name}, {self.explanation!r}, "
                f"{self.class_id}, {self.method_id})")


class ChannelError(AmqpError):
    """A soft error: closes the channel it happened on (a hard code still closes the connection)."""


class AmqpConnectionError(AmqpError):
    """A hard error: closes the connection."""


def amqp_error(reply_code: int, explanation: str, class_id: int = 0, method_id: int = 0, *,
               method_name: str | None = None) -> AmqpError:
    """The error class the code implies: ChannelError for soft codes, AmqpConnectionError otherwise."""
    cls = ChannelError if ReplyCode(reply_code).is_soft else AmqpConnectionError
    return cls(reply_code, explanation, class_id, method_id, method_name=method_name)


class LocalProtocolError(Exception):
    """The caller asked the machine for something the protocol does not allow in its current state
    (a bug in the code driving it, never the peer's doing)."""


def truncate_reply_text(text: str) -> str:
    raw = text.encode("utf-8", "surrogateescape")
    if len(raw) <= REPLY_TEXT_MAX:
        return text
    return raw[:REPLY_TEXT_MAX].decode("utf-8", "ignore")

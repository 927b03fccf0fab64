"""A connection's configure / write / read permissions on its vhost, checked as RabbitMQ checks them.

Which method needs which permission on which resource (RabbitMQ's access-control table; a check
comes before the resource is looked up, so a refused name is refused whether or not it exists):

    exchange.declare (not passive)      configure: the exchange; with alternate-exchange also
                                        read: the exchange, write: the alternate exchange
    exchange.delete                     configure: the exchange
    exchange.bind / unbind              write: the destination exchange, read: the source exchange
    queue.declare (not passive)         configure: the queue (a server-named one too: "amq.gen-...")
    queue.delete                        configure: the queue
    queue.bind / unbind                 write: the queue, read: the exchange
    queue.purge, basic.get / consume    read: the queue
    basic.publish                       write: the exchange

Passive declares need nothing. The default exchange is named "amq.default" in checks and refusals.
A pattern is a regular-expression search over the name; the empty pattern is "^$" (grants nothing). A
refusal is 403 ACCESS_REFUSED on the channel: "access to queue 'q' in vhost '/' refused for user 'u'".

basic.publish checks on every message, so each pattern remembers its last answers per name, and
".*" is no check at all.
"""

from __future__ import annotations

import re

from core.auth import EVERYTHING, Permission
from protocols.amqp.machine.errors import ChannelError
from protocols.amqp.spec import ReplyCode

DEFAULT_EXCHANGE_NAME = "amq.default"
_REMEMBERED = 256     # answers kept per pattern (names a connection uses over and over)


class _Pattern:
    __slots__ = ("_search", "_answers")

    def __init__(self, pattern: str) -> None:
        try:
            self._search = re.compile(pattern or "^$").search
        except re.error:     # cannot come from a validated config; then it grants nothing
            self._search = lambda name: None
        self._answers: dict[str, bool] = {}

    def allows(self, name: str) -> bool:
        answer = self._answers.get(name)
        if answer is None:
            if len(self._answers) >= _REMEMBERED:
                self._answers.clear()
            answer = self._answers[name] = self._search(name) is not None
        return answer


def _pattern(pattern: str) -> _Pattern | None:
    """None when the pattern matches every name."""
    return None if pattern == EVERYTHING else _Pattern(pattern)


class ResourceAccess:
    """One connection's permission on the vhost it opened."""

    __slots__ = ("vhost", "user", "_configure", "_write", "_read")

    def __init__(self, permission: Permission, vhost: str, user: str) -> None:
        self.vhost = vhost
        self.user = user
        self._configure = _pattern(permission.configure)
        self._write = _pattern(permission.write)
        self._read = _pattern(permission.read)

    def configure_queue(self, name: str) -> None:
        if self._configure is not None and not self._configure.allows(name):
            raise self._refused("queue", name)

    def configure_exchange(self, name: str) -> None:
        name = name or DEFAULT_EXCHANGE_NAME
        if self._configure is not None and not self._configure.allows(name):
            raise self._refused("exchange", name)

    def write_queue(self, name: str) -> None:
        if self._write is not None and not self._write.allows(name):
            raise self._refused("queue", name)

    def write_exchange(self, name: str) -> None:
        if self._write is not None:
            name = name or DEFAULT_EXCHANGE_NAME
            if not self._write.allows(name):
                raise self._refused("exchange", name)

    def read_queue(self, name: str) -> None:
        if self._read is not None and not self._read.allows(name):
            raise self._refused("queue", name)

    def read_exchange(self, name: str) -> None:
        name = name or DEFAULT_EXCHANGE_NAME
        if self._read is not None and not self._read.allows(name):
            raise self._refused("exchange", name)

    def _refused(self, kind: str, name: str) -> ChannelError:
        return ChannelError(ReplyCode.ACCESS_REFUSED,
                            f"access to {kind} '{name}' in vhost '{self.vhost}' refused for user '{self.user}'")

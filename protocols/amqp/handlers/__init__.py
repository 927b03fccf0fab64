"""The channel methods a client may send, one module per AMQP class, collected into HANDLERS.

Each handler is `handler(channel, args)` (basic.publish: `handler(channel, event)`) and returns
None or an awaitable. Errors are raised: ChannelError / AmqpConnectionError as RabbitMQ would send
them, or a core error, which the server maps (protocols/amqp/errors.py). Answers go out through
`channel.send(...)`. Synchronous methods with nowait=true are not answered.
"""

from __future__ import annotations

from protocols.amqp.handlers import basic, channel_methods, confirm, exchange, queue, tx

HANDLERS = {**exchange.HANDLERS, **queue.HANDLERS, **basic.HANDLERS, **confirm.HANDLERS, **channel_methods.HANDLERS,
            **tx.HANDLERS}

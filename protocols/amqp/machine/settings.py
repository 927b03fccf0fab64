"""What the server says about itself in the handshake, and the limits it negotiates and enforces."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# RabbitMQ's defaults.
DEFAULT_CHANNEL_MAX = 2047
DEFAULT_FRAME_MAX = 131072
DEFAULT_HEARTBEAT = 60
DEFAULT_MAX_MESSAGE_SIZE = 128 * 1024 * 1024
# Above this a declared body size is a FRAME_ERROR whatever the setting (RabbitMQ's ?MAX_MSG_SIZE).
ABSOLUTE_MAX_MESSAGE_SIZE = 512 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ServerSettings:
    # The connection.start capabilities table: exactly the extensions the broker behind implements
    # (publisher_confirms, basic.nack, consumer_cancel_notify, exchange_exchange_bindings,
    # connection.blocked, authentication_failure_close, per_consumer_qos, ...).
    capabilities: Mapping[str, bool]
    product: str = "gateway"
    version: str = "0.1.0"
    platform: str = "Python {}.{}.{}".format(*sys.version_info[:3])
    extra_properties: Mapping[str, Any] = field(default_factory=dict)   # cluster_name, copyright, ...
    mechanisms: tuple[str, ...] = ("PLAIN", "AMQPLAIN")
    locales: tuple[str, ...] = ("en_US",)
    channel_max: int = DEFAULT_CHANNEL_MAX     # proposed in tune; the client may lower it
    frame_max: int = DEFAULT_FRAME_MAX
    heartbeat: int = DEFAULT_HEARTBEAT         # seconds; the client's tune-ok value is the one used
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE

    def server_properties(self) -> dict[str, Any]:
        return {
            "capabilities": dict(self.capabilities),
            "product": self.product,
            "version": self.version,
            "platform": self.platform,
            **self.extra_properties,
        }

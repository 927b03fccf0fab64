"""Client quotas on a Kafka connection, as Kafka enforces them since KIP-219.

Produce requests count their frame size against the client's producer_byte_rate, Fetch responses
their size against its consumer_byte_rate (core/quotas.py meters both). A request that goes over
is answered at once, with the throttle time in the response's throttle_time_ms, and the
connection then reads nothing more from the client until that time has passed; clients honour
the field too, so a well-behaved one waits on its own side.

A namespace's publish and dispatch rates (core/meters.py, shared with AMQP) throttle the same
way: the longer of the two waits is the one answered.
"""

from __future__ import annotations

import math

from core.meters import NamespaceMeter
from core.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE
from protocols.kafka.broker import KafkaBroker, ConnectionSession
from protocols.kafka.codec.frames import RequestHeader

PRODUCE_KEY, FETCH_KEY = 0, 1
QUOTA_KEYS = {PRODUCE_KEY: PRODUCER_BYTE_RATE, FETCH_KEY: CONSUMER_BYTE_RATE}
ANONYMOUS = "ANONYMOUS"     # Kafka's user name of an unauthenticated client


async def throttle_ms(broker: KafkaBroker, session: ConnectionSession, header: RequestHeader, size: int) -> int:
    """Count `size` bytes of this Produce request / Fetch response; the throttle time it earns."""
    principal = session.principal
    user = principal.user if principal is not None else ANONYMOUS
    return await broker.quotas.throttle_ms(QUOTA_KEYS[header.api_key], user, header.client_id or "", size)


def namespace_throttle_ms(meter: NamespaceMeter, api_key: int) -> int:
    """How long the namespace's publish (Produce) or dispatch (Fetch) rate says to wait."""
    delay = meter.publish_delay_s() if api_key == PRODUCE_KEY else meter.dispatch_delay_s()
    return math.ceil(delay * 1000)

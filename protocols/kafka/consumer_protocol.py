"""The topics a Kafka consumer group's members subscribe to, read from their JoinGroup metadata.

Members of protocol type "consumer" send a ConsumerProtocolSubscription as the metadata of every
assignor: int16 version, then the subscribed topics (int32 count, int16-length strings); what
follows (user data, owned partitions, ...) depends on the version and is not needed here.
"""

from __future__ import annotations

import struct

CONSUMER_PROTOCOL_TYPE = "consumer"
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def subscribed_topics(metadata: bytes) -> list[str]:
    """The topics of one subscription; ValueError if it cannot be read."""
    try:
        pos = _INT16.size                                  # the version
        (count,) = _INT32.unpack_from(metadata, pos)
        pos += _INT32.size
        if count < 0:
            raise ValueError(f"negative topic count {count}")
        topics = []
        for _ in range(count):
            (length,) = _INT16.unpack_from(metadata, pos)
            pos += _INT16.size
            if length < 0 or pos + length > len(metadata):
                raise ValueError(f"bad topic name length {length}")
            topics.append(metadata[pos:pos + length].decode())
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"unreadable consumer subscription: {exc}") from None


def consumed_topics(protocol_type: str | None, metadata: list[bytes]) -> set[str] | None:
    """The topics a group's members subscribe to; None if it is not a consumer group. ValueError
    if a subscription cannot be read."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None
    topics: set[str] = set()
    for one in metadata:
        topics.update(subscribed_topics(one))
    return topics

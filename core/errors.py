"""Protocol-neutral errors of the core. Each protocol maps every one of them to its own codes, in one
table per protocol; a test checks the tables cover every subclass."""

from __future__ import annotations

from typing import ClassVar


class CoreError(Exception):
    retriable: ClassVar[bool] = False


class InvalidName(CoreError):
    pass


class UnknownTenant(CoreError):
    pass


class UnknownTopic(CoreError):
    """The topic or partition does not exist."""


class TopicExists(CoreError):
    pass


class InvalidPartitions(CoreError):
    pass


class InvalidConfig(CoreError):
    pass


class PolicyViolation(CoreError):
    pass


class OffsetOutOfRange(CoreError):
    pass


class RecordTooLarge(CoreError):
    """A batch over the topic's max.message.bytes."""


class CorruptRecord(CoreError):
    """A batch that fails its CRC or is truncated."""


class InvalidRecord(CoreError):
    """A batch that is well-formed bytes but breaks the format's rules (magic, counts)."""


class NotOwner(CoreError):
    """This node no longer owns the partition (its log was fenced or taken over)."""
    retriable = True


class StorageUnavailable(CoreError):
    """The storage cannot take writes right now (read-only bookie, not enough bookies)."""
    retriable = True


class OutOfOrderSequence(CoreError):
    """An idempotent producer's batch does not follow its previous one."""


class InvalidProducerEpoch(CoreError):
    """A batch from an older epoch of an idempotent producer (a fenced zombie)."""

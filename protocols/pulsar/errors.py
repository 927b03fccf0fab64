"""Core errors as Pulsar's ServerError codes: one table, checked by a test to cover every core error."""

from __future__ import annotations

from core import errors as core_errors
from protocols.pulsar.codec.pulsar_wire_pb2 import (
    AuthorizationError,
    ConsumerBusy,
    InvalidTopicName,
    MetadataError,
    NotAllowedError,
    PersistenceError,
    ProducerBlockedQuotaExceededError,
    ServiceNotReady,
    SubscriptionNotFound,
    TopicNotFound,
    UnknownError,
)

# Most specific first: the first class an error is an instance of decides.
SERVER_ERRORS: tuple[tuple[type[BaseException], int], ...] = (
    (core_errors.InvalidName, InvalidTopicName),
    (core_errors.UnknownTenant, TopicNotFound),
    (core_errors.UnknownTopic, TopicNotFound),
    (core_errors.NotOwner, ServiceNotReady),          # the client looks the topic up again
    (core_errors.FencedLeaderEpoch, ServiceNotReady),
    (core_errors.UnknownLeaderEpoch, ServiceNotReady),
    (core_errors.StorageUnavailable, PersistenceError),
    (core_errors.RecordTooLarge, NotAllowedError),
    (core_errors.CorruptRecord, NotAllowedError),
    (core_errors.InvalidRecord, NotAllowedError),
    (core_errors.BacklogQuotaExceeded, ProducerBlockedQuotaExceededError),
    (core_errors.PolicyViolation, NotAllowedError),
    (core_errors.MirrorTopic, NotAllowedError),
    (core_errors.ExclusiveUse, ConsumerBusy),
    (core_errors.ResourceInUse, ConsumerBusy),
    (core_errors.ResourceLocked, ConsumerBusy),
    (core_errors.UnknownQueue, SubscriptionNotFound),
    (core_errors.NotPermitted, AuthorizationError),
    (core_errors.NotCoordinator, ServiceNotReady),
    (core_errors.GroupError, MetadataError),
    (core_errors.CoreError, UnknownError),
)


def server_error(exc: BaseException) -> int:
    for kind, code in SERVER_ERRORS:
        if isinstance(exc, kind):
            return code
    return UnknownError

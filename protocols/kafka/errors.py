"""Core errors as Kafka error codes: one table, checked by a test to cover every CoreError."""

from __future__ import annotations

from core import errors as core
from core.transactions import errors as txn
from protocols.kafka.codec.errors import ErrorCode

CORE_TO_KAFKA: dict[type[core.CoreError], ErrorCode] = {
    core.CoreError: ErrorCode.UNKNOWN_SERVER_ERROR,
    core.InvalidName: ErrorCode.INVALID_TOPIC_EXCEPTION,
    core.UnknownTenant: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    core.UnknownTopic: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    core.TopicExists: ErrorCode.TOPIC_ALREADY_EXISTS,
    core.InvalidPartitions: ErrorCode.INVALID_PARTITIONS,
    core.InvalidConfig: ErrorCode.INVALID_CONFIG,
    core.PolicyViolation: ErrorCode.POLICY_VIOLATION,
    core.BacklogQuotaExceeded: ErrorCode.POLICY_VIOLATION,     # not retriable: the producer is told at once
    core.OffsetOutOfRange: ErrorCode.OFFSET_OUT_OF_RANGE,
    core.RecordTooLarge: ErrorCode.MESSAGE_TOO_LARGE,
    core.CorruptRecord: ErrorCode.CORRUPT_MESSAGE,
    core.InvalidRecord: ErrorCode.INVALID_RECORD,
    core.NotOwner: ErrorCode.NOT_LEADER_OR_FOLLOWER,
    core.FencedLeaderEpoch: ErrorCode.FENCED_LEADER_EPOCH,
    core.UnknownLeaderEpoch: ErrorCode.UNKNOWN_LEADER_EPOCH,
    core.StorageUnavailable: ErrorCode.KAFKA_STORAGE_ERROR,
    core.NotSent: ErrorCode.KAFKA_STORAGE_ERROR,
    core.RequestRefused: ErrorCode.UNKNOWN_SERVER_ERROR,
    core.NotEnoughReplicas: ErrorCode.NOT_ENOUGH_REPLICAS,
    core.OutOfOrderSequence: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    # Only just after a refused or failed append (else a gap is OUT_OF_ORDER_SEQUENCE_NUMBER): retriable
    # and "not stored" in every client, where librdkafka answers OUT_OF_ORDER_SEQUENCE_NUMBER on a batch
    # behind a failed one by bumping the producer epoch, which renumbers (and so duplicates) possibly
    # stored batches of its other partitions (confluentinc/librdkafka#4953).
    core.SequenceGap: ErrorCode.NOT_ENOUGH_REPLICAS,
    core.InvalidProducerEpoch: ErrorCode.INVALID_PRODUCER_EPOCH,
    core.MirrorTopic: ErrorCode.INVALID_REQUEST,    # as Kafka's cluster links answer for mirror topics
    core.UnknownProducerId: ErrorCode.UNKNOWN_PRODUCER_ID,
    core.GroupError: ErrorCode.UNKNOWN_SERVER_ERROR,
    core.InvalidGroupId: ErrorCode.INVALID_GROUP_ID,
    core.InvalidSessionTimeout: ErrorCode.INVALID_SESSION_TIMEOUT,
    core.GroupFull: ErrorCode.GROUP_MAX_SIZE_REACHED,
    core.UnknownMember: ErrorCode.UNKNOWN_MEMBER_ID,
    core.IllegalGeneration: ErrorCode.ILLEGAL_GENERATION,
    core.RebalanceInProgress: ErrorCode.REBALANCE_IN_PROGRESS,
    core.InconsistentGroupProtocol: ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
    core.MemberIdRequired: ErrorCode.MEMBER_ID_REQUIRED,
    core.FencedInstanceId: ErrorCode.FENCED_INSTANCE_ID,
    core.NonEmptyGroup: ErrorCode.NON_EMPTY_GROUP,
    core.FencedMemberEpoch: ErrorCode.FENCED_MEMBER_EPOCH,
    core.StaleMemberEpoch: ErrorCode.STALE_MEMBER_EPOCH,
    core.UnreleasedInstanceId: ErrorCode.UNRELEASED_INSTANCE_ID,
    core.UnsupportedAssignor: ErrorCode.UNSUPPORTED_ASSIGNOR,
    core.InvalidGroupRequest: ErrorCode.INVALID_REQUEST,
    core.UnsupportedGroupVersion: ErrorCode.UNSUPPORTED_VERSION,
    core.InvalidRegularExpression: ErrorCode.INVALID_REGULAR_EXPRESSION,
    core.GroupNotFound: ErrorCode.GROUP_ID_NOT_FOUND,
    core.GroupSubscribedToTopic: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
    core.NotCoordinator: ErrorCode.NOT_COORDINATOR,
    core.OffsetMetadataTooLarge: ErrorCode.OFFSET_METADATA_TOO_LARGE,
    core.InvalidAcl: ErrorCode.INVALID_REQUEST,
    core.UnknownQueue: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    core.UnknownExchange: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    core.InequivalentDeclaration: ErrorCode.INVALID_CONFIG,
    core.ResourceLocked: ErrorCode.INVALID_REQUEST,
    core.ExclusiveUse: ErrorCode.INVALID_REQUEST,
    core.ResourceInUse: ErrorCode.INVALID_REQUEST,
    core.ReservedName: ErrorCode.INVALID_TOPIC_EXCEPTION,
    core.NotPermitted: ErrorCode.INVALID_REQUEST,
    core.InvalidArgument: ErrorCode.INVALID_CONFIG,
    txn.TransactionError: ErrorCode.UNKNOWN_SERVER_ERROR,
    txn.InvalidTxnState: ErrorCode.INVALID_TXN_STATE,
    txn.InvalidProducerIdMapping: ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    txn.ProducerFenced: ErrorCode.INVALID_PRODUCER_EPOCH,   # PRODUCER_FENCED where the API version knows it
    txn.ConcurrentTransactions: ErrorCode.CONCURRENT_TRANSACTIONS,
    txn.InvalidTransactionTimeout: ErrorCode.INVALID_TRANSACTION_TIMEOUT,
    txn.InvalidTransactionalId: ErrorCode.INVALID_REQUEST,
}


def kafka_code(exc: core.CoreError) -> ErrorCode:
    for cls in type(exc).__mro__:
        code = CORE_TO_KAFKA.get(cls)
        if code is not None:
            return code
    return ErrorCode.UNKNOWN_SERVER_ERROR

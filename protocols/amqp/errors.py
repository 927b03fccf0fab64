"""Core errors as the AMQP exceptions RabbitMQ would raise for the same situation.

Soft codes (403, 404, 405, 406) close the channel; INTERNAL_ERROR (541) closes the connection.
The table names every core error (tests/protocols/amqp/test_amqp_core_errors.py checks it), so a
new one gets its code by decision, not by falling through to 541. A core error about a queue or an
exchange carries it as its Resource; it is worded here with its vhost, as RabbitMQ words it
("NOT_FOUND - no queue 'q' in vhost '/'").
"""

from __future__ import annotations

from core import errors as core
from core.transactions import errors as txn
from protocols.amqp.machine.errors import AmqpError, amqp_error
from protocols.amqp.spec import ReplyCode

CORE_TO_AMQP: dict[type[core.CoreError], ReplyCode] = {
    # what queue, exchange and binding methods meet
    core.UnknownQueue: ReplyCode.NOT_FOUND,
    core.UnknownExchange: ReplyCode.NOT_FOUND,
    core.UnknownTopic: ReplyCode.NOT_FOUND,
    core.UnknownTenant: ReplyCode.NOT_FOUND,
    core.InequivalentDeclaration: ReplyCode.PRECONDITION_FAILED,
    core.ResourceLocked: ReplyCode.RESOURCE_LOCKED,
    core.ExclusiveUse: ReplyCode.ACCESS_REFUSED,
    core.ResourceInUse: ReplyCode.PRECONDITION_FAILED,
    core.ReservedName: ReplyCode.ACCESS_REFUSED,
    core.NotPermitted: ReplyCode.ACCESS_REFUSED,
    core.InvalidArgument: ReplyCode.PRECONDITION_FAILED,
    core.InvalidName: ReplyCode.PRECONDITION_FAILED,
    core.RecordTooLarge: ReplyCode.PRECONDITION_FAILED,
    # Another broker of the cluster owns the queue: close the connection, naming that broker, so the
    # client reconnects there (AMQP 0.9.1 has no redirect).
    core.NotOwner: ReplyCode.CONNECTION_FORCED,
    core.InvalidConfig: ReplyCode.PRECONDITION_FAILED,
    core.InvalidPartitions: ReplyCode.PRECONDITION_FAILED,     # a queue over a topic of several partitions
    core.PolicyViolation: ReplyCode.PRECONDITION_FAILED,
    # a publish into a partition over its namespace's backlog quota: nacked (RabbitMQ's reject-publish)
    core.BacklogQuotaExceeded: ReplyCode.PRECONDITION_FAILED,
    # the storage failed (RabbitMQ, too, answers what it cannot do for internal reasons with 541)
    core.CoreError: ReplyCode.INTERNAL_ERROR,
    core.StorageUnavailable: ReplyCode.INTERNAL_ERROR,
    core.NotSent: ReplyCode.CONNECTION_FORCED,      # the broker serving a queue cannot be reached now
    core.RequestRefused: ReplyCode.INTERNAL_ERROR,
    core.NotEnoughReplicas: ReplyCode.INTERNAL_ERROR,
    core.OffsetOutOfRange: ReplyCode.INTERNAL_ERROR,
    core.CorruptRecord: ReplyCode.INTERNAL_ERROR,               # records the gateway built itself
    core.FencedLeaderEpoch: ReplyCode.INTERNAL_ERROR,           # Kafka's alone: AMQP names no epochs
    core.UnknownLeaderEpoch: ReplyCode.INTERNAL_ERROR,
    core.InvalidRecord: ReplyCode.INTERNAL_ERROR,
    core.TopicExists: ReplyCode.INTERNAL_ERROR,
    # Kafka's alone (producers, groups, ACLs, transactions): never raised by what AMQP methods call
    core.OutOfOrderSequence: ReplyCode.INTERNAL_ERROR,
    core.SequenceGap: ReplyCode.INTERNAL_ERROR,
    core.MirrorTopic: ReplyCode.ACCESS_REFUSED,
    core.InvalidProducerEpoch: ReplyCode.INTERNAL_ERROR,
    core.UnknownProducerId: ReplyCode.INTERNAL_ERROR,
    core.GroupError: ReplyCode.INTERNAL_ERROR,
    core.InvalidGroupId: ReplyCode.INTERNAL_ERROR,
    core.InvalidSessionTimeout: ReplyCode.INTERNAL_ERROR,
    core.GroupFull: ReplyCode.INTERNAL_ERROR,
    core.NotCoordinator: ReplyCode.INTERNAL_ERROR,
    core.FencedMemberEpoch: ReplyCode.INTERNAL_ERROR,
    core.StaleMemberEpoch: ReplyCode.INTERNAL_ERROR,
    core.InvalidGroupRequest: ReplyCode.INTERNAL_ERROR,
    core.InvalidRegularExpression: ReplyCode.INTERNAL_ERROR,
    core.UnreleasedInstanceId: ReplyCode.INTERNAL_ERROR,
    core.UnsupportedAssignor: ReplyCode.INTERNAL_ERROR,
    core.UnsupportedGroupVersion: ReplyCode.INTERNAL_ERROR,
    core.UnknownMember: ReplyCode.INTERNAL_ERROR,
    core.IllegalGeneration: ReplyCode.INTERNAL_ERROR,
    core.RebalanceInProgress: ReplyCode.INTERNAL_ERROR,
    core.InconsistentGroupProtocol: ReplyCode.INTERNAL_ERROR,
    core.MemberIdRequired: ReplyCode.INTERNAL_ERROR,
    core.FencedInstanceId: ReplyCode.INTERNAL_ERROR,
    core.NonEmptyGroup: ReplyCode.INTERNAL_ERROR,
    core.GroupNotFound: ReplyCode.INTERNAL_ERROR,
    core.GroupSubscribedToTopic: ReplyCode.INTERNAL_ERROR,
    core.OffsetMetadataTooLarge: ReplyCode.INTERNAL_ERROR,
    core.InvalidAcl: ReplyCode.INTERNAL_ERROR,
    txn.TransactionError: ReplyCode.INTERNAL_ERROR,
    txn.InvalidTxnState: ReplyCode.INTERNAL_ERROR,
    txn.InvalidProducerIdMapping: ReplyCode.INTERNAL_ERROR,
    txn.ProducerFenced: ReplyCode.INTERNAL_ERROR,
    txn.ConcurrentTransactions: ReplyCode.INTERNAL_ERROR,
    txn.InvalidTransactionTimeout: ReplyCode.INTERNAL_ERROR,
    txn.InvalidTransactionalId: ReplyCode.INTERNAL_ERROR,
}

def amqp_code(exc: core.CoreError) -> ReplyCode:
    for cls in type(exc).__mro__:
        code = CORE_TO_AMQP.get(cls)
        if code is not None:
            return code
    return ReplyCode.INTERNAL_ERROR


def from_core(exc: core.CoreError, vhost: str, class_id: int = 0, method_id: int = 0) -> AmqpError:
    code = amqp_code(exc)
    text = exc.describe(lambda resource: f"{resource} in vhost '{vhost}'")   # RabbitMQ names the vhost
    return amqp_error(code, text, class_id, method_id)

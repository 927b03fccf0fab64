"""Protocol-neutral errors of the core. Each protocol maps every one of them to its own codes, in one
table per protocol; a test checks the tables cover every subclass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

RESOURCE = "{resource}"   # where an error's message names its resource


@dataclass(frozen=True, slots=True)
class Resource:
    """The queue or exchange an error is about. The core names it plainly; a protocol may word it
    its own way (AMQP adds the vhost, as RabbitMQ does)."""
    kind: str    # "queue" or "exchange"
    name: str

    @classmethod
    def queue(cls, name: str) -> "Resource":
        return cls("queue", name)

    @classmethod
    def exchange(cls, name: str) -> "Resource":
        return cls("exchange", name)

    def __str__(self) -> str:
        return f"{self.kind} '{self.name}'"


class CoreError(Exception):
    retriable: ClassVar[bool] = False
    resource: Resource | None = None

    @classmethod
    def about(cls, resource: Resource, message: str) -> "CoreError":
        """An error whose message says RESOURCE where it names `resource`."""
        error = cls(message)
        error.resource = resource
        return error

    def describe(self, word: Callable[[Resource], str] = str) -> str:
        """The message, with its resource worded by `word`."""
        text = super().__str__()
        return text if self.resource is None else text.replace(RESOURCE, word(self.resource))

    def __str__(self) -> str:
        return self.describe()


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


class BacklogQuotaExceeded(PolicyViolation):
    """The partition's slowest subscription is further behind than its namespace allows."""


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


class FencedLeaderEpoch(CoreError):
    """The client's leader epoch of the partition is older than this broker's: its metadata is stale."""
    retriable = True


class UnknownLeaderEpoch(CoreError):
    """The client's leader epoch of the partition is newer than this broker's (it lags behind)."""
    retriable = True


class StorageUnavailable(CoreError):
    """The storage cannot take writes right now (read-only bookie, not enough bookies)."""
    retriable = True


class NotSent(StorageUnavailable):
    """A request for another broker of the cluster never left this one (no link to it could be
    made): asking again is safe."""


class RequestRefused(CoreError):
    """Another broker refused what this one asked it to do for state it owns (core/cluster/mailbox.py)."""


class NotEnoughReplicas(StorageUnavailable):
    """Fewer bookies accept writes than the ack quorum needs: nothing is acknowledged until they return."""


class MirrorTopic(CoreError):
    """A mirror topic takes records only from its replicator, the source's batches at their own
    offsets (clients read it; removing its mirror.source config makes it an ordinary topic)."""


class OutOfOrderSequence(CoreError):
    """An idempotent producer's batch does not follow its previous one: it repeats sequences older
    than the batches kept for duplicate detection."""


class SequenceGap(OutOfOrderSequence):
    """An idempotent producer's batch is ahead of the sequence this partition expects while a batch
    before it was refused or failed here moments ago: nothing is stored, and the client retries it
    after sending the missing one again (core/producer_state.py, core/partition.py)."""
    retriable = True


class UnknownProducerId(CoreError):
    """A batch continuing the sequence of an idempotent producer this partition has no state for:
    what came before it is not in the log (lost in an owner change before it was stored, or older
    than the state kept), so storing it would skip those records."""


class InvalidProducerEpoch(CoreError):
    """A batch from an older epoch of an idempotent producer (a fenced zombie)."""


# --- membership groups (core/groups) ----------------------------------------------------------------


class GroupError(CoreError):
    """A membership-group request refused by the group's state. `member_id`, when set, is the member
    id the answer must carry (the new id for MemberIdRequired, "" for a member that was removed)."""

    def __init__(self, message: str = "", *, member_id: str | None = None) -> None:
        super().__init__(message)
        self.member_id = member_id


class InvalidGroupId(GroupError):
    pass


class InvalidSessionTimeout(GroupError):
    pass


class GroupFull(GroupError):
    """The group already has its maximum number of members (Kafka's group.max.size)."""


class UnknownMember(GroupError):
    pass


class IllegalGeneration(GroupError):
    pass


class RebalanceInProgress(GroupError):
    pass


class InconsistentGroupProtocol(GroupError):
    """The member's protocol type or protocols do not fit the group's."""


class MemberIdRequired(GroupError):
    """Two-phase join: the member must join again with the id it was given."""


class FencedInstanceId(GroupError):
    """Another member now holds this static instance id."""


class FencedMemberEpoch(GroupError):
    """A consumer-protocol member sent an epoch that is not its own: it must join again."""


class StaleMemberEpoch(GroupError):
    """An offset commit of a consumer-protocol member carries another epoch than the member's."""


class UnreleasedInstanceId(GroupError):
    """A static member joins with an instance id that a member still in the group holds."""


class UnsupportedAssignor(GroupError):
    """A member asks for a server-side assignor the broker does not have."""


class InvalidRegularExpression(GroupError):
    """A member subscribes with a topic regular expression that does not compile."""


class UnsupportedGroupVersion(GroupError):
    """The request's version cannot express what this group needs (e.g. a member epoch)."""


class InvalidGroupRequest(GroupError):
    """A group request whose fields contradict each other or the member's state."""


class NonEmptyGroup(GroupError):
    pass


class GroupNotFound(GroupError):
    pass


class GroupSubscribedToTopic(GroupError):
    """A committed offset cannot be deleted while a live member consumes its topic."""


class NotCoordinator(GroupError):
    """This broker does not own the bundle of the group or transactional id: another one coordinates it."""
    retriable = True


class OffsetMetadataTooLarge(CoreError):
    pass


class InvalidAcl(CoreError):
    """An ACL binding that cannot be stored (unknown elements, a "/" in the resource name)."""


# --- queues and exchanges (core/queues) -------------------------------------------------------------


class UnknownQueue(CoreError):
    pass


class UnknownExchange(CoreError):
    pass


class InequivalentDeclaration(CoreError):
    """A queue or exchange declared again with settings that differ from the existing one's."""


class ResourceLocked(CoreError):
    """An exclusive queue used by someone other than its owner."""


class ExclusiveUse(CoreError):
    """A consumer that wants a queue to itself, or a queue that an exclusive consumer holds."""


class ResourceInUse(CoreError):
    """A conditional delete refused: the queue has consumers or messages, the exchange has bindings."""


class ReservedName(CoreError):
    """A name reserved for the predeclared exchanges and server-named queues."""


class NotPermitted(CoreError):
    """An operation the object does not allow (binding the default exchange, publishing to an
    internal exchange)."""


class InvalidArgument(CoreError):
    """An argument with a bad value, or one the core does not implement yet (refused, never ignored)."""

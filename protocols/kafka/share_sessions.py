"""Share sessions (KIP-932) and what ShareFetch and ShareAcknowledge share.

A share session belongs to one member of one share group on this broker: the partitions the member
fetches from, and an epoch. Epoch 0 opens a session (a member's earlier one is replaced and what it
held is released), -1 closes it (what it held is released), any other epoch must be the session's
next one (INVALID_SHARE_SESSION_EPOCH) of an existing session (SHARE_SESSION_NOT_FOUND); every
answered request moves the epoch on by one (after 2^31-1 comes 1).

Topics are named by id on the wire; a session remembers the name of each id it was given.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.errors import CoreError
from core.groups.store import GroupKey
from core.names import TopicName
from core.shares.share_partition import SharePartition
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code

if TYPE_CHECKING:      # broker.py holds the sessions
    from protocols.kafka.broker import RequestContext

OPEN_EPOCH = 0
CLOSE_EPOCH = -1
MAX_EPOCH = 0x7FFFFFFF

TopicPartitionId = tuple[uuid.UUID, int]


@dataclass(slots=True)
class ShareSession:
    epoch: int = 1
    partitions: set[TopicPartitionId] = field(default_factory=set)

    def next_epoch(self) -> None:
        self.epoch = 1 if self.epoch == MAX_EPOCH else self.epoch + 1


class ShareSessions:
    """Every share session of this broker, by group and member."""

    def __init__(self) -> None:
        self._sessions: dict[tuple[GroupKey, str], ShareSession] = {}
        self._names: dict[tuple[str, str, uuid.UUID], TopicName] = {}

    def check(self, key: GroupKey, member_id: str, epoch: int) -> ErrorCode:
        """Whether a request at `epoch` may go on (before anything is done)."""
        if epoch == OPEN_EPOCH:
            return ErrorCode.NONE
        session = self._sessions.get((key, member_id))
        if session is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND
        if epoch != CLOSE_EPOCH and epoch != session.epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH
        return ErrorCode.NONE

    def open(self, key: GroupKey, member_id: str) -> tuple[ShareSession, bool]:
        """A new session; True if it replaced one."""
        replaced = self._sessions.pop((key, member_id), None) is not None
        session = self._sessions[(key, member_id)] = ShareSession()
        return session, replaced

    def get(self, key: GroupKey, member_id: str) -> ShareSession | None:
        return self._sessions.get((key, member_id))

    def close(self, key: GroupKey, member_id: str) -> bool:
        return self._sessions.pop((key, member_id), None) is not None

    async def topic(self, ctx: RequestContext, topic_id: uuid.UUID) -> TopicName | None:
        """The topic of the client's namespace with this id (remembered), or None."""
        ident = (ctx.tenant, ctx.namespace, topic_id)
        name = self._names.get(ident)
        if name is None:
            info = await ctx.core.topic_by_id(ctx.tenant, ctx.namespace, topic_id.hex)
            if info is None:
                return None
            name = self._names[ident] = info.name
        return name


def sessions(ctx: RequestContext) -> ShareSessions:
    return ctx.broker.share_sessions


async def share_partition(ctx: RequestContext, key: GroupKey, topic_id: uuid.UUID,
                          index: int) -> SharePartition | ErrorCode:
    name = await sessions(ctx).topic(ctx, topic_id)
    if name is None:
        return ErrorCode.UNKNOWN_TOPIC_ID
    try:
        return await ctx.broker.shares.share_partition(key, name, index)
    except CoreError as exc:
        return kafka_code(exc)


async def acknowledge(ctx: RequestContext, key: GroupKey, member_id: str,
                      topics: Iterable) -> dict[TopicPartitionId, ErrorCode]:
    """Apply the acknowledgement batches of a request's topics; persist them before returning.
    Returns the acknowledge error code of every partition named."""
    codes: dict[TopicPartitionId, ErrorCode] = {}
    touched: list[SharePartition] = []
    for topic in topics:
        for part in topic.partitions:
            if not part.acknowledgement_batches:
                continue
            ident = (topic.topic_id, part.partition_index)
            share = await share_partition(ctx, key, topic.topic_id, part.partition_index)
            if isinstance(share, ErrorCode):
                codes[ident] = share
                continue
            code = codes.get(ident, ErrorCode.NONE)
            for batch in part.acknowledgement_batches:
                if not share.acknowledge(member_id, batch.first_offset, batch.last_offset,
                                         list(batch.acknowledge_types)):
                    code = ErrorCode.INVALID_RECORD_STATE
            codes[ident] = code
            touched.append(share)
    for share in touched:
        try:
            await share.flush()
        except CoreError as exc:      # not durable: none of them counts as acknowledged
            return {ident: kafka_code(exc) for ident in codes}
    return codes


def release_member(ctx: RequestContext, key: GroupKey, member_id: str) -> None:
    ctx.broker.shares.release_member(key, member_id)


# Filled in by Kafka only with NOT_LEADER_OR_FOLLOWER, which a share partition here never answers.
NO_LEADER_CHANGE = {"leader_id": -1, "leader_epoch": -1}


def key_of(ctx: RequestContext, group_id: str | None) -> GroupKey:
    return GroupKey(ctx.tenant, ctx.namespace, group_id or "")

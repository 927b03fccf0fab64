"""The values group operations answer with: frozen, protocol-neutral."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """One member as the leader sees it in a join result: its metadata for the chosen protocol."""

    member_id: str
    instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    member_id: str
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str
    members: tuple[JoinedMember, ...] = ()   # only the leader gets them


@dataclass(frozen=True, slots=True)
class SyncResult:
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes      # empty unless the group is Stable
    assignment: bytes    # empty unless the group is Stable


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: tuple[MemberSummary, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"     # Kafka's group types: classic, consumer (KIP-848), share (KIP-932)


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""
    leader_epoch: int = -1   # the leader epoch of the last record consumed (-1: unknown)

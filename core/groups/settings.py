"""The group coordinator's settings; the names in comments are Kafka's broker settings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GroupSettings:
    min_session_timeout_ms: int = 6_000          # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000      # group.max.session.timeout.ms
    # group.initial.rebalance.delay.ms: how long a new (empty) group waits for more members before
    # its first generation; each member that joins during the wait extends it once more, up to the
    # rebalance timeout.
    initial_rebalance_delay_ms: int = 3_000
    new_member_join_timeout_ms: int = 300_000    # Kafka's fixed NewMemberJoinTimeoutMs
    offset_metadata_max_bytes: int = 4096        # offset.metadata.max.bytes
    max_size: int = 0x7FFFFFFF                   # group.max.size: members per group
    # offsets.retention.minutes, in ms: the committed offsets of a group Empty this long (and, for a
    # group never joined by members, committed this long ago) are deleted.
    offsets_retention_ms: int = 10_080 * 60_000
    offsets_retention_check_ms: int = 600_000    # offsets.retention.check.interval.ms
    # How long an Empty group stays in memory; its committed offsets stay stored, and the group is
    # loaded again from them when next used.
    empty_group_idle_ms: int = 600_000
    # Consumer-protocol (KIP-848) groups: the broker decides the session and heartbeat timing.
    consumer_session_timeout_ms: int = 45_000     # group.consumer.session.timeout.ms
    consumer_heartbeat_interval_ms: int = 5_000   # group.consumer.heartbeat.interval.ms

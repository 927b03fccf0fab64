"""Settings of the storage layer (the gateway's `[storage]` config section)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from storage.node_tls import NodeTls

EMBEDDED = "embedded"
REPLICATED = "replicated"


@dataclass(frozen=True, slots=True)
class StorageConfig:
    journal_max_wait_ms: float = 2.0            # group commit: flush once the oldest add waited this long
    journal_max_bytes: int = 512 * 1024         # ... or once this much is buffered
    journal_segment_bytes: int = 256 << 20      # roll the journal segment past this size
    index_sync_interval_s: float = 5.0          # how often the entry index is checkpointed to disk
    ledger_roll_bytes: int = 128 << 20          # managed log: close the current ledger past this size
    ledger_roll_ms: int = 4 * 3600 * 1000       # ... or past this age
    # Replicated mode: bookie servers and a ZooKeeper metadata store instead of the embedded bookie.
    mode: str = EMBEDDED                        # "embedded" or "replicated"
    metadata: str = ""                          # zk://host:port[,host:port]/root (replicated)
    secret: str = ""                            # shared secret of bookies and gateways (config file only)
    ensemble_size: int = 1                      # E: bookies a ledger is striped over
    write_quorum: int = 1                       # Qw: copies of each entry
    ack_quorum: int = 1                         # Qa: copies fsynced before an add is acknowledged
    min_racks_per_write_quorum: int = 1         # > 1: acks must span that many racks
    namespace_quorums: dict = field(default_factory=dict)   # {"tenant/namespace": [E, Qw, Qa]}
    bookie_timeout_ms: float = 5000.0           # a bookie request unanswered this long fails (ensemble change)
    speculative_read_ms: float = 100.0          # ask the next replica when a read takes longer
    explicit_lac_ms: float = 50.0               # an idle writer sends its LAC on its own after this (0: never)
    zookeeper_session_timeout_ms: float = 10000.0
    # Auto-recovery (storage/ledger/auditor.py): one gateway's auditor re-replicates lost bookies' data.
    auditor: bool = True                        # take part in the auditor election (replicated mode)
    lost_bookie_grace_ms: float = 30000.0       # a bookie unregistered this long is lost and re-replicated
    audit_interval_ms: float = 5000.0           # how often the active auditor checks the ledgers
    rereplication_bytes_per_s: int = 32 << 20   # copy throttle of the active auditor (0: unlimited)
    # Mutual TLS between bookies, gateways and broker peers (storage/node_tls.py): a PEM certificate
    # of the cluster's private CA, its key, and that CA; all three or none
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""

    def __post_init__(self) -> None:
        if self.journal_max_wait_ms < 0 or self.journal_max_bytes <= 0:
            raise ValueError("journal group-commit bounds must be positive")
        if self.journal_segment_bytes < 1 << 20:
            raise ValueError("journal_segment_bytes must be at least 1 MiB")
        if self.mode not in (EMBEDDED, REPLICATED):
            raise ValueError(f"mode must be {EMBEDDED!r} or {REPLICATED!r}, got {self.mode!r}")
        for quorum in (self.quorum, *self.namespace_quorums.values()):
            if len(quorum) != 3 or not all(isinstance(q, int) for q in quorum) \
                    or not quorum[0] >= quorum[1] >= quorum[2] >= 1:
                raise ValueError(f"quorum {list(quorum)} must be [E, Qw, Qa] with E >= Qw >= Qa >= 1")
        if self.explicit_lac_ms < 0:
            raise ValueError("explicit_lac_ms must be >= 0 (0: never)")
        if self.lost_bookie_grace_ms < 0 or self.audit_interval_ms <= 0 or self.rereplication_bytes_per_s < 0:
            raise ValueError("auditor settings must be positive (rereplication_bytes_per_s 0: unlimited)")
        if len({bool(self.tls_cert), bool(self.tls_key), bool(self.tls_ca)}) != 1:
            raise ValueError("tls_cert, tls_key and tls_ca go together: give all three or none")
        for name in ("tls_cert", "tls_key", "tls_ca"):
            if getattr(self, name) and not os.path.isfile(getattr(self, name)):
                raise ValueError(f"{name}: no such file {getattr(self, name)!r}")
        if self.mode == REPLICATED:
            if not self.metadata.startswith("zk://"):
                raise ValueError("replicated storage needs metadata = \"zk://host:port/root\"")
            if not self.secret:
                raise ValueError("replicated storage needs a shared secret (secret = \"...\" in the config file)")

    @property
    def node_tls(self) -> NodeTls | None:
        """The nodes' TLS contexts, loaded from the files now; None without tls_cert."""
        if not self.tls_cert:
            return None
        return NodeTls.load(self.tls_cert, self.tls_key, self.tls_ca)

    @property
    def quorum(self) -> tuple[int, int, int]:
        return (self.ensemble_size, self.write_quorum, self.ack_quorum)

    def quorum_for(self, log_name: str) -> tuple[int, int, int] | None:
        """A log's own quorum sizes when its namespace ("tenant/namespace/...") has some."""
        tenant, _, rest = log_name.partition("/")
        namespace = rest.partition("/")[0]
        quorum = self.namespace_quorums.get(f"{tenant}/{namespace}")
        return None if quorum is None else tuple(quorum)

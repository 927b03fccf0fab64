"""The storage layer as the rest of the gateway sees it.

Storage vocabulary only: ledgers and entries, managed logs of opaque entries with dense positions
("offsets"), and a versioned metadata store. Nothing here knows what a topic, a Kafka batch or an
AMQP queue is. `core/` imports this module and nothing else from `storage/`; the concrete
implementations are wired in by `gateway/`.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol


# --- errors ---------------------------------------------------------------------------------------


class StorageError(Exception):
    """Base of every storage failure."""


class LedgerFenced(StorageError):
    """The ledger was fenced by a recovering reader: this writer lost ownership. Ambiguous for the
    entry that got it (it may or may not be stored), like a timeout."""


class LedgerClosed(StorageError):
    """An add on a ledger that is already closed."""


class NoSuchLedger(StorageError):
    pass


class NoSuchEntry(StorageError):
    pass


class CorruptEntry(StorageError):
    """A stored entry failed its checksum. It is never served."""


class NotEnoughBookies(StorageError):
    """Fewer bookies are writable than the ensemble needs."""


class BookieUnavailable(StorageError):
    """A remote bookie could not be reached or did not answer in time. Ambiguous for an add (it may
    have stored the entry), so the writer replaces the bookie rather than assuming either way."""


class BookieReadOnly(StorageError):
    """The bookie stopped accepting writes (a failed fsync, a full disk). Never retried."""


class CookieMismatch(StorageError):
    """The data directory does not belong to the instance the metadata store knows (wiped or swapped)."""


class BadVersion(StorageError):
    """A compare-and-set lost: the node changed since it was read."""


class NodeExists(StorageError):
    pass


class NoNode(StorageError):
    pass


class Fenced(StorageError):
    """A guarded metadata write was refused: its guard node is gone or changed, so the writer no
    longer holds what the guard stood for (a lease lost with its session, a term taken over)."""


class PositionOutOfRange(StorageError):
    """A managed-log read below the log start or above the end."""


class LogClosed(StorageError):
    """The managed log was closed (shutdown or lost ownership)."""


# --- metadata store -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Versioned:
    value: bytes
    version: int


@dataclass(frozen=True, slots=True)
class Guard:
    """A precondition a metadata write carries: the write applies, atomically, only while the node
    at `path` exists at `version` (a fencing token, as ZooKeeper's multi-op `check` is one). A
    writer that holds an ephemeral guard node loses its writes with its session: a process paused
    past its session cannot overwrite what the next owner wrote."""
    path: str
    version: int = 0


WatchCallback = Callable[[str], None]
"""Called with the changed path, on the event loop, after a put/create/delete of that path."""


class SessionState(enum.Enum):
    """The metadata store's session, as ZooKeeper has one (an embedded store's lasts until close)."""

    CONNECTED = "connected"
    """Connected, to the same session as before or (after LOST) to a new one."""
    SUSPENDED = "suspended"
    """Connection lost; the session may still live or may expire meanwhile. Nothing an ephemeral node
    or a watch guards may be acted on until CONNECTED (nothing lost) or LOST."""
    LOST = "lost"
    """The session expired: every ephemeral node it created is gone, every watch was dropped."""


SessionCallback = Callable[[SessionState], None]
"""Called with the new state, on the event loop."""


class MetadataStore(Protocol):
    """A hierarchical key-value store with versions, as ZooKeeper and BookKeeper's `Versioned<T>` have.

    Paths look like "/a/b/c". Every write is durable when it returns. Versions start at 0 on create
    and grow by one per put.

    Sessions: ephemeral nodes live as long as the store's session. After a reconnection, every
    registered watch fires once, because changes made while disconnected may have been missed:
    watchers re-read instead of trusting what they saw before. Ephemeral nodes lost with a session
    are never recreated by the store; their owner decides (on LOST it no longer owns anything).
    """

    async def get(self, path: str, *, latest: bool = False) -> Versioned | None:
        """The node, or None. A store's reads follow its own writes; another store's newest write may
        be seen a little later (a ZooKeeper server behind its leader), unless `latest` asks for the
        value as of now (one more round trip there)."""

    async def create(self, path: str, value: bytes, *, ephemeral: bool = False, guard: Guard | None = None) -> int:
        """Create `path`; raises NodeExists. Returns the version (0). An ephemeral node is deleted
        when this store's session ends (close, expiry, or the process dies)."""

    async def put(self, path: str, value: bytes, expected_version: int | None = None, *,
                  guard: Guard | None = None) -> int:
        """Write `path`. With expected_version, a compare-and-set: BadVersion if it differs, NoNode
        if absent. Without, create-or-overwrite. Returns the new version."""

    async def delete(self, path: str, expected_version: int | None = None, *, guard: Guard | None = None) -> None:
        """Delete `path` (NoNode if absent, BadVersion on a lost compare-and-set).

        Every write takes a `guard`: with one it applies only if the guard holds, else nothing is
        written and Fenced is raised (before any other error of the write)."""

    async def children(self, path: str) -> list[str]:
        """Names of the direct children of `path`, sorted."""

    async def next_id(self, counter: str) -> int:
        """A durable counter: a new, never reused value on every call."""

    def watch(self, path: str, callback: WatchCallback) -> Callable[[], None]:
        """Call `callback` whenever `path` changes; returns a function that cancels the watch."""

    def on_session_event(self, callback: SessionCallback) -> Callable[[], None]:
        """Call `callback` on every change of the session state; returns a function that cancels it."""

    @property
    def session_id(self) -> int | None:
        """The current session's id; None where there are no sessions (embedded)."""

    def session_alive_until(self) -> float:
        """Until when (time.monotonic()) the current session surely lasts: a session expires only
        after the server heard nothing from it for its timeout, so the send time of the latest
        request answered in it, plus that timeout. -inf without a session; inf where sessions do
        not expire (embedded)."""

    async def close(self) -> None: ...


# --- bookie (the entry store) ---------------------------------------------------------------------


class EntryStore(Protocol):
    """A bookie as a ledger client sees it. Entries are addressed by (ledger id, entry id)."""

    def add(self, ledger_id: int, entry_id: int, payload: bytes | tuple[bytes | memoryview, ...], lac: int, *,
            recovery: bool = False) -> Awaitable[None]:
        """Store one entry (a tuple of parts is stored as their concatenation, without joining them
        in memory); durable (journal fsynced) when the awaitable resolves. `lac` is the writer's
        LastAddConfirmed, piggybacked. Raises LedgerFenced once the ledger is fenced, unless
        `recovery` (a recovering reader rewriting the tail). Idempotent for the same entry."""

    async def read(self, ledger_id: int, entry_id: int, *, fence: bool = False) -> bytes:
        """One entry (NoSuchEntry, CorruptEntry). With `fence`, the ledger is fenced first: recovery
        reads are themselves fencing, so a bookie that missed the fence request cannot go on
        accepting the old writer's adds after serving the recovery."""

    async def read_range(self, ledger_id: int, first_entry_id: int, last_entry_id: int, max_bytes: int) -> list[bytes]:
        """Entries first..last in order, stopping early once `max_bytes` is reached (at least one)."""

    async def read_entries(self, ledger_id: int, entry_ids: list[int]) -> list[bytes]:
        """The entries named, in that order (NoSuchEntry if one is not stored): a reader jumping
        around a ledger pays one request for many entries."""

    async def fence(self, ledger_id: int) -> int:
        """Fence the ledger durably; idempotent, never undone. Returns the last entry id stored (-1)."""

    async def last_add_confirmed(self, ledger_id: int) -> int: ...

    async def wait_lac(self, ledger_id: int, after: int, timeout_s: float) -> int:
        """Long poll: the LastAddConfirmed once it is above `after`, or as it is after the timeout."""

    async def write_lac(self, ledger_id: int, lac: int) -> None:
        """The writer's LastAddConfirmed on its own (BookKeeper's explicit LAC), sent when it goes
        idle so that readers see its last entries before its next add. Only raises it."""

    async def delete_ledger(self, ledger_id: int) -> None:
        """Forget the ledger; its space is reclaimed by garbage collection. Idempotent."""


# --- ledgers --------------------------------------------------------------------------------------


class LedgerWriter(Protocol):
    """The single writer of one open ledger. Not thread-safe; owned by one task."""

    ledger_id: int

    @property
    def last_add_confirmed(self) -> int: ...

    def add(self, payload: bytes | tuple[bytes | memoryview, ...]) -> asyncio.Future[int]:
        """Queue one entry (pipelined; a tuple of parts is one entry). The future resolves to its entry id once it is durable on an
        ack quorum and every earlier entry is too, so completions arrive in entry order."""

    async def close(self) -> int:
        """Wait for pending adds, then seal the ledger; returns its last entry id."""


class LedgerReader(Protocol):
    ledger_id: int

    @property
    def last_add_confirmed(self) -> int: ...

    async def read(self, first_entry_id: int, last_entry_id: int, max_bytes: int = 1 << 62) -> list[bytes]: ...


class LedgerClient(Protocol):
    async def create(self, *, ensemble_size: int = 1, write_quorum: int = 1, ack_quorum: int = 1,
                     properties: dict[str, str] | None = None) -> LedgerWriter: ...

    async def open(self, ledger_id: int, *, recover: bool = True) -> LedgerReader:
        """With `recover`, fence the ledger, recover its tail and close it, so no old writer can add
        to it any more. Without, open read-only up to the last confirmed entry."""

    async def delete(self, ledger_id: int) -> None: ...


# --- managed logs ---------------------------------------------------------------------------------


@dataclass(slots=True)   # not frozen: a frozen one costs ~2 µs more to build, once per entry read
class LogEntry:
    """One stored entry of a managed log and the positions it covers: base_offset ..
    base_offset + record_count - 1."""

    base_offset: int
    record_count: int
    max_timestamp_ms: int
    payload: bytes | memoryview

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    retention_ms: int = -1        # -1: keep forever
    retention_bytes: int = -1     # -1: no size bound
    roll_bytes: int = 128 << 20   # close the current ledger past this size
    roll_ms: int = 7 * 24 * 3600 * 1000


class ManagedLog(Protocol):
    """An ordered list of ledgers holding one dense sequence of offsets (a partition's log).

    Single writer: only the owner appends, from one task. Reads may come from any task.
    """

    name: str

    @property
    def log_start_offset(self) -> int: ...

    @property
    def next_offset(self) -> int:
        """The offset the next append gets (assigned at once, durable later)."""

    @property
    def high_watermark(self) -> int:
        """One past the last durable offset: what readers may see."""

    @property
    def size_bytes(self) -> int: ...

    @property
    def leader_epoch(self) -> int:
        """The epoch this writer began when it opened the log (Kafka's partition leader epoch)."""

    def epoch_at(self, offset: int) -> int:
        """The epoch in which `offset` was written; -1 before the first recorded epoch."""

    def epoch_end(self, epoch: int) -> tuple[int, int]:
        """(the largest epoch <= `epoch`, the offset where it ended), as Kafka's OffsetForLeaderEpoch
        answers; the current epoch ends at the high watermark; (-1, -1) when unknown."""

    def append(self, payload: bytes, record_count: int, max_timestamp_ms: int) -> Awaitable[int]:
        """Assign `next_offset` to the entry synchronously, then resolve to it once durable.
        Appends complete in order."""

    async def read(self, offset: int, max_bytes: int) -> list[LogEntry]:
        """Whole entries from the one containing `offset`, up to `max_bytes` (at least one entry if
        any exists). Raises PositionOutOfRange outside [log_start_offset, high_watermark]."""

    async def read_holding(self, offsets: list[int]) -> list[LogEntry]:
        """The entries holding `offsets` (sorted), each once and in log order; offsets outside
        [log_start_offset, high_watermark) are skipped. One read for many scattered offsets."""

    async def find_by_timestamp(self, timestamp_ms: int) -> LogEntry | None:
        """The first entry whose max timestamp is >= timestamp_ms, or None."""

    async def wait_for_append(self, offset: int, timeout_s: float) -> bool:
        """Wait until high_watermark > offset or the timeout passes; True if data arrived."""

    async def wait_repaired(self) -> None:
        """After an append failed for a storage reason its outcome is unknown (the entry may be stored
        or not); the log then recovers its ledger. This returns once that is done and every append
        made before has its outcome, so the log's content is known again and nothing lands behind
        it; at once when nothing is under repair or in flight. LogClosed if the log closed."""

    async def trim(self, policy: RetentionPolicy, now_ms: int) -> int:
        """Drop whole ledgers past retention; returns the new log start offset."""

    async def delete_before(self, offset: int) -> int:
        """Move the log start offset to `offset` (Kafka DeleteRecords); whole ledgers below it are
        deleted. Returns the new log start offset."""

    async def start_at(self, offset: int) -> None:
        """Begin a log that never held an entry at `offset` instead (a copy of a log whose head is
        gone). PositionOutOfRange if it holds or held entries, or `offset` is below its end."""

    async def close(self) -> None: ...


class LogFollower(Protocol):
    """A managed log as a process that does not write it reads it (a read-only broker): what the
    writer acknowledged, kept up to date in the background. `on_append` is called when the high
    watermark moves."""

    name: str
    on_append: Callable[[], None] | None

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...

    def epoch_at(self, offset: int) -> int: ...

    def epoch_end(self, epoch: int) -> tuple[int, int]: ...

    async def read(self, offset: int, max_bytes: int) -> list[LogEntry]: ...

    async def read_holding(self, offsets: list[int]) -> list[LogEntry]: ...

    async def wait_for_append(self, offset: int, timeout_s: float) -> bool: ...

    async def close(self) -> None: ...


class ManagedLogFactory(Protocol):
    async def open_log(self, name: str, policy: RetentionPolicy) -> ManagedLog:
        """Open (creating if needed) the log `name`, recovering and fencing its last ledger so a
        previous owner can no longer write to it."""

    async def follow_log(self, name: str) -> "LogFollower":
        """Read the log `name` that another process writes, never fencing or writing it."""

    async def delete_log(self, name: str) -> None: ...

    async def needs_recovery(self, name: str) -> bool:
        """Whether the log's last ledger is still open (its writer crashed or lost ownership), so the
        next open will fence and recover it."""

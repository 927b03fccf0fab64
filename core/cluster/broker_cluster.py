"""This broker's part in a cluster of brokers sharing one metadata store (ZooKeeper).

    /cluster/brokers/<id>             ephemeral  BrokerInfo: who is alive and where
    /cluster/leader                   ephemeral  {"broker": id}: the one broker that assigns bundles
    /cluster/assignment               {"bundles": {"<t>/<ns>/<i>": broker id}}, written by the leader
    /cluster/leases/<t>/<ns>/<i>      ephemeral  {"broker": id}: who owns the bundle right now
    /cluster/terms/<t>/<ns>/<i>/<instance>  ephemeral  the owner's term on the bundle: its writes' guard
    /cluster/load/<id>                ephemeral  LoadReport: the broker's traffic per bundle (load.py)
    /cluster/placements               bundles an operator put on a chosen broker (placements.py)
    /cluster/layouts                  where each namespace's bundles end (bundles.py)
    /cluster/splits                   bundles an operator asked to split (splits.py)

Why a leader assigns instead of every broker claiming a fair share: claims race (two brokers that
both see three live brokers may both claim the same spare bundle, and each join or death makes every
broker recompute), while one assigner sees one membership and moves only what must move
(assignment.py). The leader is whoever holds the ephemeral leader node; if it dies another takes
the node. Assignment is only intent: a broker serves a bundle only while it holds the bundle's
ephemeral lease, which it takes once the previous owner released it or lost its session.

New brokers and namespaces are found by polling every `poll_s` (a few cheap reads); the assignment,
the leader node, every known broker's node and the leases this broker waits for are watched, so a
departure or a release is acted on at once.

Load: every broker reports its traffic per bundle every `report_interval_s`; once per
`shed_interval_s` the leader moves at most one bundle off a broker busier than the mean by more
than `shed_threshold` (load.py has the rule, which never sends a bundle back and forth).

Placements: an operator (a Kafka partition reassignment) may put a bundle on a chosen broker; the
leader moves it there and keeps it there (assignment.py, placements.py).

Splits: the owner of a bundle that is too busy (or that an operator names) cuts it in two
(`split`): it writes the namespace's new layout, then releases the bundle as for a move (its
partitions close, sealing their ledgers; its term and lease go). The leader gives both halves to
the same broker (assignment.py `inherited`), which opens the partitions again on new ledgers; the
count and load rules may later move a half. Nothing is served twice: a bundle is taken only if it
is in the layout read after its lease was made, and no lease of an overlapping bundle (the parent,
or a child taken by a broker that read the layout early) exists then (`_acquire`).

Sessions: on SUSPENDED the broker stops serving at once (`suspended`: the core refuses every
partition); on CONNECTED with the same session it resumes; on LOST every bundle is dropped (the
release callbacks close its partitions and groups), the registration is made again in the new
session and bundles are taken again as assigned. A broker paused past its session timeout learns of
the loss only when it runs again. Its appends fail because the new owner fenced its ledgers when it
opened the partitions; its metadata writes (offset commits, cursors, group and transaction state)
fail because each carries the guard of its term on the bundle (`guard`): a node made in the
session that took the lease, under a path no later term uses. The session's expiry deleted it
before any other broker could take the lease, so a late write cannot land after the new owner
read the state, and nothing the new owner writes depends on it.

What needs no write is stopped by the clock: a broker counts as suspended as soon as its session
was not confirmed alive within its timeout (MetadataStore.session_alive_until: no other broker can
have taken its leases before then). So a paused broker, woken, hands nothing it held in memory
(a queue's read-ahead) to its consumers before it learns of the loss: `owns` is False from the
first instant. Whatever waits on that (`when_serving`) is called once the session is confirmed
again (a read every CONFIRM_S besides the steps).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

from core.cluster.assignment import assign, inherited
from core.cluster.bundles import LAYOUTS, Bundle, Layouts, follow
from core.cluster.json_nodes import read_json, update_json
from core.cluster.load import LOAD, LoadReport, RateMeter, Traffic, shed
from core.cluster.members import SERVING, BrokerInfo
from core.cluster.placements import PLACEMENTS, Placement, read_placements, update_placements
from core.cluster.splits import SPLITS, SplitLimits, drop_split_requests, read_split_requests, traffic_split
from storage.api import BadVersion, Fenced, Guard, MetadataStore, NodeExists, NoNode, SessionState, StorageError

log = logging.getLogger("gateway.cluster")

BROKERS = "/cluster/brokers"
LEADER = "/cluster/leader"
ASSIGNMENT = "/cluster/assignment"
LEASES = "/cluster/leases"
TERMS = "/cluster/terms"
POLL_S = 1.0
CONFIRM_S = 0.5      # the session is confirmed alive at least this often (well under its timeout)
REPORT_INTERVAL_S = 5.0
SHED_INTERVAL_S = 60.0      # Pulsar's loadBalancerSheddingIntervalMinutes
SHED_THRESHOLD = 0.10       # Pulsar's loadBalancerBrokerThresholdShedderPercentage

BundleCallback = Callable[[Bundle], Awaitable[None]]


def _holder_value(local: BrokerInfo) -> bytes:
    return json.dumps({"broker": local.id, "instance": local.instance}).encode()


def _held_by(raw: bytes, local: BrokerInfo) -> bool:
    """Whether a leader or lease node was made by this process in its current session."""
    try:
        return json.loads(raw).get("instance") == local.instance
    except ValueError:
        return False


class OwnerLease:
    """What a bundle's owner asks before acting on state it holds only in memory (handing a queue's
    read-ahead out): whether it owns the bundle now, and a call once it may again."""

    __slots__ = ("_cluster", "_bundle")

    def __init__(self, cluster: "BrokerCluster", bundle: Bundle) -> None:
        self._cluster, self._bundle = cluster, bundle

    def held(self) -> bool:
        return self._cluster.owns(self._bundle)

    def when_held(self, callback: Callable[[], None]) -> bool:
        """`callback()` once the broker, suspended now, serves again (True). A bundle that is simply
        not held (False) is never given back to what asked: its release closes that, or it is being
        taken and whoever serves it next starts afresh."""
        if not self._cluster.suspended:
            return False
        self._cluster.when_serving(callback)
        return True


class BrokerCluster:
    def __init__(self, metadata: MetadataStore, local: BrokerInfo, *, poll_s: float = POLL_S,
                 report_interval_s: float = REPORT_INTERVAL_S, shed_interval_s: float = SHED_INTERVAL_S,
                 shed_threshold: float = SHED_THRESHOLD, split_limits: SplitLimits = SplitLimits()) -> None:
        self.metadata = metadata
        self.local = local
        self._instance = local.instance or uuid.uuid4().hex
        self._sessions = 0
        self._suspended = True           # serving nothing: not registered yet, or the session is in doubt
        self._serving_waiters: list[Callable[[], None]] = []
        self._poll_s = poll_s
        self._session = SessionState.CONNECTED
        self._sessions_lost = 0          # what a step made in an earlier session went with it
        self._registered = False
        self._brokers: dict[int, BrokerInfo] = {}
        self._assignment: dict[Bundle, int] = {}
        self.layouts = Layouts()          # as last read
        self._steps = asyncio.Lock()      # a step and a split never interleave
        self._held: set[Bundle] = set()
        self._guards: dict[Bundle, Guard] = {}                    # the term of each bundle taken
        self._dropped: set[Bundle] = set()                        # lost with the session: to release
        self._waiting: dict[Bundle, Callable[[], None]] = {}      # lease watches of bundles held elsewhere
        self._member_watches: dict[int, Callable[[], None]] = {}
        self._on_release: list[BundleCallback] = []
        self._on_acquire: list[BundleCallback] = []
        self._on_left: list[Callable[[], None]] = []
        self._on_serving: list[Callable[[Bundle], None]] = []
        self.is_leader = False
        self.leader_id: int | None = None   # the leader as last seen
        self._changed = asyncio.Event()
        self._cancels: list[Callable[[], None]] = []
        self._task: asyncio.Task | None = None
        self._confirming: asyncio.Task | None = None
        # Load: what this broker reports (set by its owner: cumulative counts per bundle path) ...
        self.traffic: Callable[[], Mapping[str, Traffic]] | None = None
        self.connections: Callable[[], int] | None = None
        self._report_interval_s = report_interval_s
        self._rates = RateMeter()
        self._reported_at = float("-inf")
        self._report_session: int | None = None      # the session this broker's report node was made in
        # ... and what the leader sheds by.
        self._shed_interval_s, self._shed_threshold = shed_interval_s, shed_threshold
        self._shed_at = time.monotonic()             # a first shed waits a whole interval of reports
        self.reports: dict[int, LoadReport] = {}     # as the leader last read them
        # Splits: when this broker splits a bundle it owns, and where (set by its owner: the
        # (hash, weight) of each partition of the bundle open here).
        self.split_limits = split_limits
        self.partition_weights: Callable[[Bundle], list[tuple[int, float]]] | None = None

    # --- what the rest of the broker asks -------------------------------------------------------

    @property
    def suspended(self) -> bool:
        """Serving nothing: not registered yet, the session in doubt, or not confirmed alive lately."""
        return self._suspended or time.monotonic() >= self.metadata.session_alive_until()

    def owns(self, bundle: Bundle) -> bool:
        return bundle in self._held and not self.suspended

    def lease(self, bundle: Bundle) -> "OwnerLease":
        return OwnerLease(self, bundle)

    def when_serving(self, callback: Callable[[], None]) -> None:
        """`callback()` runs once this broker is found not `suspended` (after the next step or
        session read): in the session it had, or in a new one (where it may own nothing it had)."""
        self._serving_waiters.append(callback)

    def guard(self, bundle: Bundle) -> Guard:
        """What a write made as the bundle's owner must carry (Fenced if this broker has no term on it)."""
        guard = self._guards.get(bundle)
        if guard is None:
            raise Fenced(f"broker {self.local.id} does not own bundle {bundle}")
        return guard

    def owner(self, bundle: Bundle) -> BrokerInfo | None:
        """The live broker the bundle is assigned to (it may still be taking the lease), or None."""
        broker_id = self._assignment.get(bundle)
        return None if broker_id is None else self._brokers.get(broker_id)

    def brokers(self) -> list[BrokerInfo]:
        return [self._brokers[broker_id] for broker_id in sorted(self._brokers)]

    @property
    def process(self) -> str:
        """This process: `instance` without its session count."""
        return self._instance

    async def registered_processes(self) -> frozenset[str]:
        """The processes of the brokers registered now: read from the store, not as last polled (a
        broker that registered since must not be taken for gone)."""
        found = set()
        for name in await self.metadata.children(BROKERS):
            node = await self.metadata.get(f"{BROKERS}/{name}")
            if node is not None:
                found.add(BrokerInfo.from_json(node.value).instance.split(".")[0])
        return frozenset(found)

    def on_serving(self, callback: Callable[[Bundle], None]) -> None:
        """`callback(bundle)` runs once a bundle taken counts as owned (after the on_acquire ones)."""
        self._on_serving.append(callback)

    def on_broker_left(self, callback: Callable[[], None]) -> None:
        """`callback()` runs when a broker was seen to leave (what its process declared may go)."""
        self._on_left.append(callback)

    @property
    def assignment(self) -> dict[Bundle, int]:
        """Bundle -> the broker the leader assigned it to, as last read."""
        return dict(self._assignment)

    @property
    def held(self) -> frozenset[Bundle]:
        return frozenset(self._held)

    def on_release(self, callback: BundleCallback) -> None:
        """`callback(bundle)` runs when this broker stops owning a bundle, before the lease is given up."""
        self._on_release.append(callback)

    def on_acquire(self, callback: BundleCallback) -> None:
        """`callback(bundle)` runs when this broker takes a bundle, before it serves it."""
        self._on_acquire.append(callback)

    # --- life -----------------------------------------------------------------------------------

    async def start(self) -> None:
        self._cancels.append(self.metadata.on_session_event(self._on_session))
        for path in (ASSIGNMENT, LEADER, PLACEMENTS, LAYOUTS, SPLITS):
            self._cancels.append(self.metadata.watch(path, self._wake))
        await self._register(self._sessions_lost)
        async with self._steps:
            await self._step()
        self._task = asyncio.create_task(self._run(), name="broker-cluster")
        self._confirming = asyncio.create_task(self._confirm_session(), name="broker-cluster-session")

    async def close(self) -> None:
        """Give every bundle back (closing what it serves) so other brokers take over at once."""
        for task in (self._task, self._confirming):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        for cancel in self._cancels + list(self._waiting.values()) + list(self._member_watches.values()):
            cancel()
        self._waiting.clear()
        self._member_watches.clear()
        for bundle in sorted(self._held):
            await self._release(bundle, give_up_lease=self._session is SessionState.CONNECTED)
        self._suspended = True
        for path in (LEADER if self.is_leader else None, f"{BROKERS}/{self.local.id}" if self._registered else None):
            if path is not None:
                try:
                    await self.metadata.delete(path)
                except (NoNode, StorageError):
                    pass

    def _wake(self, _path: str = "") -> None:
        self._changed.set()

    def _on_session(self, state: SessionState) -> None:
        self._session = state
        if state is not SessionState.CONNECTED:
            if not self._suspended:
                log.warning("metadata session %s: serving nothing until it is back", state.value)
            self._suspended = True
        if state is SessionState.LOST:
            # Every ephemeral node went with the session: the leases, the registration, the leadership.
            self._sessions_lost += 1
            self._dropped |= self._held
            self._held = set()
            self._guards.clear()     # the terms went too: late writes are refused from now on
            self._registered = False
            self.is_leader = False
            for cancel in self._waiting.values():
                cancel()
            self._waiting.clear()
        self._wake()

    async def _run(self) -> None:
        while True:
            try:
                # Not wait_for: on Python 3.11 it swallows a cancel that comes as the event is set,
                # and a watched change sets it often, so close() would wait for this loop forever.
                async with asyncio.timeout(self._poll_s):
                    await self._changed.wait()
            except TimeoutError:
                pass
            self._changed.clear()
            try:
                async with self._steps:
                    await self._step()
            except StorageError as exc:
                log.warning("cluster membership step failed, will retry: %s", exc)
            except Exception:
                log.exception("cluster membership step failed")
            self._call_serving_waiters()

    async def _confirm_session(self) -> None:
        """A read every CONFIRM_S keeps the session confirmed alive (`suspended`) however long a
        step takes, and ends a lapse soon after the store answers again."""
        while True:
            await asyncio.sleep(CONFIRM_S)
            if self._session is SessionState.CONNECTED:
                try:
                    await self.metadata.get(LEADER)
                except StorageError:
                    pass
                self._call_serving_waiters()

    def _call_serving_waiters(self) -> None:
        if self._serving_waiters and not self.suspended:
            waiters, self._serving_waiters = self._serving_waiters, []
            for callback in waiters:
                callback()

    async def _step(self) -> None:
        for bundle in sorted(self._dropped):
            self._dropped.discard(bundle)
            await self._release(bundle, give_up_lease=False)
        if self._session is not SessionState.CONNECTED:
            return
        session = self._sessions_lost
        if not self._registered:
            await self._register(session)
        if self._session is not SessionState.CONNECTED:
            return   # suspended meanwhile: serving resumes at the next step in CONNECTED
        self._suspended = False
        await self._read_layouts()
        await self._read_brokers()
        if self.local.role == SERVING:      # a read-only broker never leads (nor owns anything)
            await self._elect(session)
        if self.is_leader:
            await self._assign()
        await self._read_assignment()
        await self._reconcile(session)
        await self._split_requested()
        await self._report(session)

    def _check_session(self, session: int) -> None:
        """Raise if the session a step began in was lost since: a node it created went with it, and
        recording it (registered, leader, a lease held) would leave this broker out for good."""
        if session != self._sessions_lost:
            raise StorageError("metadata session lost during the step")

    # --- membership and leadership --------------------------------------------------------------

    async def _register(self, session: int) -> None:
        """Create this broker's node. A node of this id from another process (killed, its session not
        expired yet) is waited out: its leases are still held in that session."""
        path = f"{BROKERS}/{self.local.id}"
        # A token per session: the nodes an expired session of this very process left behind (not
        # yet deleted by ZooKeeper) must not pass for this session's.
        self._sessions += 1
        self.local = replace(self.local, instance=f"{self._instance}.{self._sessions}")
        warned = False
        while True:
            try:
                await self.metadata.create(path, self.local.to_json(), ephemeral=True)
                break
            except NodeExists:
                node = await self.metadata.get(path)
                if node is not None and BrokerInfo.from_json(node.value).instance == self.local.instance:
                    break     # made in this session (a create retried across a reconnection)
                if not warned:
                    log.warning("broker id %d is still registered by an older session (its expiry is not "
                                "complete yet?): waiting for it to go", self.local.id)
                    warned = True
                await asyncio.sleep(self._poll_s / 2)
        self._check_session(session)
        self._registered = True
        log.info("registered as %s", self.local.describe())

    async def _read_brokers(self) -> None:
        found: dict[int, BrokerInfo] = {}
        for name in await self.metadata.children(BROKERS):
            broker_id = int(name)
            node = await self.metadata.get(f"{BROKERS}/{name}")   # read again: a restart keeps the id
            if node is not None:
                found[broker_id] = BrokerInfo.from_json(node.value)
        restarted = {broker_id for broker_id, info in found.items()
                     if broker_id in self._brokers and self._brokers[broker_id].instance != info.instance}
        for broker_id in found.keys() - self._brokers.keys():
            log.info("broker %d joined: %s", broker_id, found[broker_id].describe())
            # Its departure is seen at once (new brokers are found by polling).
            self._member_watches[broker_id] = self.metadata.watch(f"{BROKERS}/{broker_id}", self._wake)
        for broker_id in self._brokers.keys() - found.keys():
            log.info("broker %d left", broker_id)
            self._member_watches.pop(broker_id)()
        left = bool(self._brokers.keys() - found.keys() or restarted)
        self._brokers = found
        for callback in self._on_left if left else ():
            callback()

    async def _elect(self, session: int) -> None:
        if self.is_leader:
            return
        try:
            await self.metadata.create(LEADER, _holder_value(self.local), ephemeral=True)
        except NodeExists:
            node = await self.metadata.get(LEADER)
            if node is None:
                self._wake()      # gone meanwhile: try again at once
                return
            self.leader_id = json.loads(node.value).get("broker")
            if not _held_by(node.value, self.local):
                return
        self._check_session(session)
        self.is_leader = True
        self.leader_id = self.local.id
        log.info("broker %d is the cluster leader: it assigns bundles", self.local.id)

    async def _assign(self) -> None:
        bundles = []
        for tenant in await self.metadata.children("/tenants"):   # as core/registry.py keeps them
            for namespace in await self.metadata.children(f"/namespaces/{tenant}"):
                bundles.extend(bundle.path for bundle in self.layouts.bundles(tenant, namespace))
        node = await self.metadata.get(ASSIGNMENT)
        # Paths as this version writes them; the halves of a split stay with their parent's broker.
        written = json.loads(node.value)["bundles"] if node is not None else {}
        current = inherited({Bundle.parse(path).path: broker for path, broker in written.items()}, bundles)
        live = [broker.id for broker in self._brokers.values() if broker.role == SERVING]
        busy = {bundle: traffic[0] for report in self.reports.values() for bundle, traffic in report.bundles.items()}
        pinned = {bundle: placement.broker for bundle, placement in (await read_placements(self.metadata)).items()}
        wanted = assign(bundles, current, live, busy, pinned)
        if wanted == current and 0 < self._shed_interval_s <= time.monotonic() - self._shed_at:
            self._shed_at = time.monotonic()
            await self._read_reports()
            move = shed(current, self.reports, live, self._shed_threshold, pinned.keys())
            if move is not None:
                log.info("shedding bundle %s from broker %d to broker %d (load)", move.bundle, move.source,
                         move.target)
                wanted = {**current, move.bundle: move.target}
        if wanted == written:
            return
        value = json.dumps({"bundles": wanted}, separators=(",", ":"), sort_keys=True).encode()
        try:
            if node is None:
                await self.metadata.create(ASSIGNMENT, value)
            else:
                await self.metadata.put(ASSIGNMENT, value, node.version)
        except (NodeExists, StorageError) as exc:
            log.info("assignment not written (written meanwhile?): %s", exc)
            self._wake()
            return
        moved = sum(1 for bundle, broker in wanted.items() if current.get(bundle) not in (None, broker))
        log.info("assigned %d bundles over brokers %s (%d moved)", len(wanted), sorted(live), moved)

    async def _read_reports(self) -> None:
        reports = {}
        for name in await self.metadata.children(LOAD):
            node = await self.metadata.get(f"{LOAD}/{name}")
            if node is not None:
                try:
                    reports[int(name)] = LoadReport.from_json(node.value)
                except (ValueError, KeyError, TypeError):
                    log.warning("unreadable load report of broker %s", name)
        self.reports = reports

    async def _report(self, session: int) -> None:
        now = time.monotonic()
        if self.traffic is None or now - self._reported_at < self._report_interval_s:
            return
        self._reported_at = now
        held = {bundle.path for bundle in self._held}
        rates = {path: rate for path, rate in self._rates.rates(self.traffic(), now).items() if path in held}
        split = self._split_busiest(rates)
        if split is not None:
            bundle, at = split
            log.info("splitting bundle %s: %.0f messages/s, %.0f bytes/s", bundle, *rates[bundle.path])
            await self._split(bundle, at)
            del rates[bundle.path]
        value = LoadReport(rates, self.connections() if self.connections else 0).to_json()
        path = f"{LOAD}/{self.local.id}"
        if self._report_session == session:
            await self.metadata.put(path, value)
            return
        try:
            await self.metadata.create(path, value, ephemeral=True)
        except NodeExists:   # an earlier session's, until it expires: write over it, make ours next time
            await self.metadata.put(path, value)
            return
        self._check_session(session)
        self._report_session = session

    async def _read_assignment(self) -> None:
        node = await self.metadata.get(ASSIGNMENT)
        raw = json.loads(node.value)["bundles"] if node is not None else {}
        self._assignment = {Bundle.parse(path): broker for path, broker in raw.items()}

    async def _read_layouts(self, *, latest: bool = False) -> Layouts:
        self.layouts = Layouts(await read_json(self.metadata, LAYOUTS, latest=latest))
        follow(self.layouts)
        return self.layouts

    def _in_layout(self, bundle: Bundle) -> bool:
        return bundle in self.layouts.bundles(bundle.tenant, bundle.namespace)

    # --- splits ---------------------------------------------------------------------------------

    async def split(self, bundle: Bundle, at: int | None = None) -> tuple[Bundle, Bundle]:
        """Cut a bundle this broker owns in two at hash `at` (by default where its traffic divides):
        the halves are taken again, by this broker unless the leader moves one. ValueError if this
        broker does not own it, `at` is outside it, or its namespace has all the bundles it may."""
        async with self._steps:
            return await self._split(bundle, at)

    async def _split(self, bundle: Bundle, at: int | None) -> tuple[Bundle, Bundle]:
        if not self.owns(bundle):
            raise ValueError(f"broker {self.local.id} does not own bundle {bundle}")
        if at is None:
            at = self._traffic_split(bundle)
        if at is None:
            at = (bundle.lower + bundle.upper) // 2
        halves = bundle.halves(at)

        def cut(value) -> dict:
            layouts = Layouts(value)
            if len(layouts.bundles(bundle.tenant, bundle.namespace)) >= self.split_limits.max_bundles:
                raise ValueError(f"namespace {bundle.tenant}/{bundle.namespace} has "
                                 f"{self.split_limits.max_bundles} bundles, the most it may")
            return layouts.split(bundle, at).as_dict()

        # Guarded by this broker's term: a broker paused past its session must not split the bundle
        # after another took it over.
        follow(layouts := Layouts(await update_json(self.metadata, LAYOUTS, cut, guard=self.guard(bundle))))
        self.layouts = layouts
        placed = (await read_placements(self.metadata)).get(bundle.path)
        if placed is not None:     # an operator's placement holds for both halves
            await update_placements(self.metadata, {bundle.path: None, **{half.path: placed for half in halves}})
        # As for a move: what it serves closes, then its term and lease go (the halves wait for that).
        await self._release(bundle, give_up_lease=True)
        log.info("split bundle %s into %s and %s", bundle, *halves)
        self._wake()
        return halves

    def _split_busiest(self, rates: Mapping[str, Traffic]) -> tuple[Bundle, int] | None:
        """The busiest bundle over the split limits, if its namespace may have one more bundle and
        its traffic divides (a bundle with one busy partition stays whole: halves would not help)."""
        for path, rate in sorted(rates.items(), key=lambda item: item[1], reverse=True):
            bundle = Bundle.parse(path)
            if not self.split_limits.over(*rate):
                return None
            if len(self.layouts.bundles(bundle.tenant, bundle.namespace)) >= self.split_limits.max_bundles:
                continue
            at = self._traffic_split(bundle)
            if at is not None:
                return bundle, at
        return None

    def _traffic_split(self, bundle: Bundle) -> int | None:
        return traffic_split(self.partition_weights(bundle) if self.partition_weights else ())

    async def _split_requested(self) -> None:
        requests = await read_split_requests(self.metadata)
        done = [bundle for bundle in requests if not self._in_layout(bundle)]
        for bundle, at in requests.items():
            if bundle in self._held and not self.suspended:
                try:
                    await self._split(bundle, at)
                except ValueError as exc:
                    log.warning("split of bundle %s refused: %s", bundle, exc)
                done.append(bundle)
        await drop_split_requests(self.metadata, done)

    # --- placements (partition reassignments) ---------------------------------------------------

    def serving_ids(self) -> list[int]:
        """The live brokers that may own bundles."""
        return [broker.id for broker in self.brokers() if broker.role == SERVING]

    async def place(self, bundles: Mapping[Bundle, int]) -> None:
        """Put each bundle on the broker given: the leader moves it there and keeps it there."""
        await update_placements(self.metadata, {
            bundle.path: Placement(broker, await self.lease_holder(bundle)) for bundle, broker in bundles.items()})

    async def moves(self) -> dict[Bundle, tuple[Placement, int | None]]:
        """Placements in progress: bundle -> (its placement, the broker holding its lease now)."""
        found = {}
        for path, placement in (await read_placements(self.metadata)).items():
            bundle = Bundle.parse(path)
            holder = await self.lease_holder(bundle)
            if holder != placement.broker:
                found[bundle] = (placement, holder)
        return found

    async def cancel_moves(self, bundles: list[Bundle]) -> set[Bundle]:
        """Place the bundles whose move is in progress back on the broker each came from; returns
        the bundles that had no move in progress (left as they are)."""
        moving = await self.moves()
        await update_placements(self.metadata, {
            bundle.path: None if moving[bundle][0].source is None else Placement(moving[bundle][0].source)
            for bundle in bundles if bundle in moving})
        return {bundle for bundle in bundles if bundle not in moving}

    async def lease_holder(self, bundle: Bundle) -> int | None:
        node = await self.metadata.get(f"{LEASES}/{bundle.path}")
        return None if node is None else json.loads(node.value).get("broker")

    # --- leases ---------------------------------------------------------------------------------

    async def _reconcile(self, session: int) -> None:
        mine = {bundle for bundle, broker in self._assignment.items()
                if broker == self.local.id and self._in_layout(bundle)}
        for bundle in sorted(self._held - mine):
            await self._release(bundle, give_up_lease=True)
        for bundle in [b for b in self._waiting if b not in mine]:
            self._waiting.pop(bundle)()
        for bundle in sorted(mine - self._held):
            if self.suspended:
                return
            await self._acquire(bundle, session)

    async def _acquire(self, bundle: Bundle, session: int) -> None:
        path = f"{LEASES}/{bundle.path}"
        try:
            await self.metadata.create(path, _holder_value(self.local), ephemeral=True)
        except NodeExists:
            node = await self.metadata.get(path)
            if node is None:
                self._wake()
                return
            if not _held_by(node.value, self.local):
                if bundle not in self._waiting:   # the previous owner still holds it: wait for its release
                    self._waiting[bundle] = self.metadata.watch(path, self._wake)
                return
        cancel = self._waiting.pop(bundle, None)
        if cancel is not None:
            cancel()
        self._check_session(session)
        if not await self._alone_in_layout(bundle, path):
            return
        term = f"{TERMS}/{bundle.path}/{self.local.instance}"
        try:
            await self.metadata.create(term, b"", ephemeral=True)
        except NodeExists:
            pass     # a create retried across a reconnection: the instance names this session
        self._check_session(session)
        self._guards[bundle] = Guard(term)
        for callback in self._on_acquire:
            await callback(bundle)
        if session != self._sessions_lost:   # the lease went with the session: close what was opened
            self._dropped.add(bundle)
            self._wake()
            return
        self._held.add(bundle)
        log.info("owning bundle %s", bundle)
        for serving in self._on_serving:
            serving(bundle)

    async def _alone_in_layout(self, bundle: Bundle, lease: str) -> bool:
        """Whether the bundle, its lease just made, may be served: it is in the layout as read now (not
        split meanwhile) and no other lease overlaps it (a split's parent still closing, or a half
        taken by a broker that read the new layout first). If not, the lease is given back and
        this broker waits for the other lease to go."""
        blocker = None
        if self._in_layout(bundle) and bundle in (await self._read_layouts(latest=True)).bundles(
                bundle.tenant, bundle.namespace):
            for name in await self.metadata.children(f"{LEASES}/{bundle.tenant}/{bundle.namespace}"):
                other = f"{bundle.tenant}/{bundle.namespace}/{name}"
                if other != bundle.path and Bundle.parse(other).overlaps(bundle):
                    if not await self._drop_stale_lease(other):
                        blocker = f"{LEASES}/{other}"
                        break
            else:
                return True
        try:
            await self.metadata.delete(lease)
        except NoNode:
            pass
        if blocker is not None:     # taken again once it goes (or at the next poll)
            log.info("bundle %s waits for the lease of overlapping %s", bundle, blocker)
            self._waiting[bundle] = self.metadata.watch(blocker, self._wake)
        return False

    async def _drop_stale_lease(self, path: str) -> bool:
        """Delete the lease (and term) of a bundle this process holds no more, as a split that failed
        after writing the layout leaves it; True if it was one (or is gone)."""
        node = await self.metadata.get(f"{LEASES}/{path}")
        if node is not None and (not _held_by(node.value, self.local) or Bundle.parse(path) in self._held):
            return False
        self._guards.pop(Bundle.parse(path), None)
        for stale in (f"{TERMS}/{path}/{self.local.instance}", f"{LEASES}/{path}"):
            try:
                await self.metadata.delete(stale)
            except NoNode:
                pass
        return True

    async def _release(self, bundle: Bundle, *, give_up_lease: bool) -> None:
        self._held.discard(bundle)
        for callback in self._on_release:
            try:
                await callback(bundle)
            except Exception:
                log.exception("releasing bundle %s failed", bundle)
        guard = self._guards.pop(bundle, None)
        if give_up_lease:
            # The term ends before the lease: no write of this broker lands once another owns it.
            if guard is not None:
                try:
                    await self.metadata.delete(guard.path)
                except NoNode:
                    pass
            await self._give_up_lease(bundle)
        log.info("released bundle %s", bundle)

    async def _give_up_lease(self, bundle: Bundle) -> None:
        """Delete the bundle's lease if it is still this session's: a step that ran on after a
        pause past the session must not delete the lease the next owner took."""
        path = f"{LEASES}/{bundle.path}"
        node = await self.metadata.get(path, latest=True)
        if node is not None and _held_by(node.value, self.local):
            try:
                await self.metadata.delete(path, node.version)
            except (NoNode, BadVersion):
                pass

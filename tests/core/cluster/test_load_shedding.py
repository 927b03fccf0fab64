"""The leader's load-shedding rule (core/cluster/load.py) and the count balancing that must not undo
it, as pure functions: which bundle moves, when nothing moves, and that repeated rounds settle
without sending a bundle back."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from core.cluster.assignment import assign
from core.cluster.load import LoadReport, Move, RateMeter, shed

MB = float(1 << 20)


def reports(assignment: dict[str, int], load: dict[str, tuple[float, float]]) -> dict[int, LoadReport]:
    """What each broker would report for the bundles it holds."""
    by_broker: dict[int, dict] = {}
    for bundle, broker in assignment.items():
        by_broker.setdefault(broker, {})[bundle] = load.get(bundle, (0.0, 0.0))
    return {broker: LoadReport(bundles) for broker, bundles in by_broker.items()}


def test_the_busiest_broker_sheds_its_busiest_bundle_that_fits_half_the_gap() -> None:
    assignment = {"a": 0, "b": 0, "c": 0, "d": 1, "e": 2}
    load = {"a": (6000, 0), "b": (2500, 0), "c": (1000, 0), "d": (300, 0), "e": (200, 0)}
    # shares: broker 0 = 0.95, 1 = 0.03, 2 = 0.02; half the gap is 0.465: "a" (0.6) does not fit
    assert shed(assignment, reports(assignment, load), [0, 1, 2], 0.10) == Move("b", 0, 2)


def test_nothing_moves_within_the_threshold() -> None:
    assignment = {"a": 0, "b": 1, "c": 2, "d": 0, "e": 0}
    load = {"a": (2000, 0), "b": (3000, 0), "c": (3000, 0), "d": (1500, 0), "e": (300, 0)}  # 0.39 vs 0.33
    assert shed(assignment, reports(assignment, load), [0, 1, 2], 0.10) is None
    assert shed(assignment, reports(assignment, load), [0, 1, 2], 0.05) == Move("e", 0, 1)


def test_an_idle_cluster_never_moves_anything() -> None:
    assignment = {"a": 0, "b": 0, "c": 1}
    load = {"a": (400, 0.2 * MB), "b": (300, 0.1 * MB), "c": (0, 0)}       # all of it on broker 0, but little
    assert shed(assignment, reports(assignment, load), [0, 1], 0.10) is None


def test_one_hot_bundle_stays_where_it_is() -> None:
    """Moving it would only make the other broker the busy one."""
    assignment = {"hot": 0, "b": 1}
    load = {"hot": (50_000, 0), "b": (100, 0)}
    assert shed(assignment, reports(assignment, load), [0, 1], 0.10) is None


def test_bytes_count_beside_messages() -> None:
    assignment = {"big": 0, "bigger": 0, "small": 1}
    load = {"big": (10, 20 * MB), "bigger": (10, 40 * MB), "small": (10_000, 1 * MB)}   # 60 MB/s against 11
    assert shed(assignment, reports(assignment, load), [0, 1], 0.10) == Move("big", 0, 1)


def test_a_report_older_than_a_move_is_not_counted() -> None:
    assignment = {"a": 1, "b": 0}
    stale = {0: LoadReport({"a": (9000.0, 0.0), "b": (2000.0, 0.0)}), 1: LoadReport({})}  # "a" went to 1 since
    assert shed(assignment, stale, [0, 1], 0.10) is None


def test_a_single_broker_or_none_sheds_nothing() -> None:
    assignment = {"a": 0, "b": 0}
    load = {"a": (9000, 0), "b": (9000, 0)}
    assert shed(assignment, reports(assignment, load), [0], 0.10) is None
    assert shed(assignment, reports(assignment, load), [], 0.10) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 20_000), st.integers(0, 50)), min_size=1, max_size=24))
def test_repeated_rounds_settle_and_never_send_a_bundle_back(bundles) -> None:
    assignment = {f"b{i}": broker for i, (broker, _, _) in enumerate(bundles)}
    load = {f"b{i}": (float(messages), megabytes * MB) for i, (_, messages, megabytes) in enumerate(bundles)}
    left: dict[str, set[int]] = {}
    for _ in range(len(bundles) + 1):
        move = shed(assignment, reports(assignment, load), [0, 1, 2, 3], 0.10)
        if move is None:
            return
        assert move.target not in left.get(move.bundle, set()), f"{move.bundle} sent back to {move.target}"
        left.setdefault(move.bundle, set()).add(move.source)
        assignment[move.bundle] = move.target
    raise AssertionError("shedding did not settle")


def test_evening_the_counts_moves_an_idle_bundle_not_the_shed_one() -> None:
    current = {"a": 0, "b": 0, "c": 1, "d": 1, "e": 1, "hot": 1}   # "hot" was just shed from 0 to 1
    busy = {"hot": 8000.0, "c": 5.0, "d": 0.0, "e": 12.0}
    after = assign(current, current, [0, 1], busy)
    assert after["hot"] == 1 and after["d"] == 0
    assert sorted(after.values()).count(0) == 3


def test_rates_come_from_counts_and_a_reopened_partition_starts_again() -> None:
    meter = RateMeter()
    assert meter.rates({"a": (100.0, 1000.0)}, now_s=10.0) == {}          # the first sample has no rate
    assert meter.rates({"a": (300.0, 5000.0)}, now_s=12.0) == {"a": (100.0, 2000.0)}
    assert meter.rates({"a": (50.0, 400.0)}, now_s=14.0) == {"a": (25.0, 200.0)}  # counts went down: new since


def test_a_pinned_bundle_is_never_shed() -> None:
    assignment = {"a": 0, "b": 0, "c": 0, "d": 1, "e": 2}
    load = {"a": (6000, 0), "b": (2500, 0), "c": (1000, 0), "d": (300, 0), "e": (200, 0)}
    assert shed(assignment, reports(assignment, load), [0, 1, 2], 0.10, pinned={"b"}) == Move("c", 0, 2)
    assert shed(assignment, reports(assignment, load), [0, 1, 2], 0.10, pinned={"b", "c"}) is None

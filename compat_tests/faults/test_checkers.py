"""The checkers: each forged anomaly is caught, and generated clean histories raise no false alarm."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compat_tests.faults.harness.checkers import acked_after, check_log, check_queue, unavailability
from compat_tests.faults.harness.history import History


def clean_log() -> History:
    """Two producers, two partitions, acknowledged and read back in full by one drain reader."""
    history = History()
    offsets = {"t/0": 0, "t/1": 0}
    for seq in range(3):
        for process in ("p0", "p1"):
            for key in offsets:
                value = f"{process}-{key}-{seq}"
                op = history.invoke(process, key, value)
                history.ok(op, offsets[key])
                offsets[key] += 1
    drain(history, "drain")
    return history


def drain(history: History, reader: str) -> None:
    """Read back every acknowledged value at its acknowledged offset, in offset order."""
    stored = sorted((send.key, send.offset, send.value) for send in history.sends() if send.status == "ok")
    for key, offset, value in stored:
        history.read(reader, key, offset, value)


def test_clean_history_passes_with_every_count_zero() -> None:
    verdict = check_log(clean_log(), "clean")
    verdict.assert_ok(min_acked=12)
    assert verdict.counts["acked"] == 12 and verdict.counts["reads"] == 12
    assert verdict.line().startswith("clean: acked=12 ")


def test_lost_acknowledged_write() -> None:
    history = clean_log()
    op = history.invoke("p0", "t/0", "never-read")
    history.ok(op, 99)
    verdict = check_log(history)
    assert verdict.violations == {"lost": 1}
    assert verdict.examples["lost"][0].value == "never-read"
    with pytest.raises(AssertionError, match="lost=1"):
        verdict.assert_ok()


def test_duplicate_value_at_two_offsets() -> None:
    history = clean_log()
    history.read("late", "t/0", 5, "p0-t/0-0")  # at 0 too, and 5 holds p1-t/0-2
    assert check_log(history).violations == {"duplicated": 1, "inconsistent": 1}
    # Without idempotence a duplicate is reported but allowed; the offset collision is still wrong.
    assert check_log(history, idempotent=False).violations == {"inconsistent": 1}


def test_duplicate_in_fresh_offsets_is_allowed_only_without_idempotence() -> None:
    history = clean_log()
    history.read("late", "t/0", 6, "p1-t/0-2")
    history.read("late", "t/0", 7, "p1-t/0-2")  # the same value appended again (a retried batch)
    assert check_log(history).violations == {"duplicated": 1}
    assert check_log(history, idempotent=False).ok
    assert check_log(history, idempotent=False).counts["duplicated"] == 1


def test_inconsistent_offsets_across_readers() -> None:
    history = clean_log()
    op = history.invoke("p0", "t/1", "other")
    history.info(op, "timed out")
    history.read("second", "t/1", 2, "other")  # offset 2 of t/1 was acknowledged for another value
    verdict = check_log(history)
    assert verdict.violations == {"inconsistent": 1}
    assert verdict.examples["inconsistent"][0] == (("t/1", 2), sorted(["other", "p0-t/1-1"]))


def test_reordered_acknowledgements_of_one_producer() -> None:
    history = History()
    first, second = history.invoke("p0", "t/0", "a"), history.invoke("p0", "t/0", "b")
    history.ok(second, 0)
    history.ok(first, 1)   # sent first, stored after
    drain(history, "drain")
    verdict = check_log(history)
    assert verdict.violations == {"reordered": 1}
    assert verdict.examples["reordered"] == [("b", "a", "t/0")]


def test_producers_interleaving_is_not_a_reorder() -> None:
    history = History()
    a, b = history.invoke("p0", "t/0", "a"), history.invoke("p1", "t/0", "b")
    history.ok(b, 0)
    history.ok(a, 1)
    drain(history, "drain")
    assert check_log(history).ok


def test_nonmonotonic_and_skipping_polls() -> None:
    history = clean_log()
    t0 = {0: "p0-t/0-0", 1: "p1-t/0-0"}
    t1 = {0: "p0-t/1-0", 2: "p0-t/1-1"}
    for offset in (0, 1, 0):
        history.read("rewinds", "t/0", offset, t0[offset])
    for offset in (0, 2):
        history.read("skips", "t/1", offset, t1[offset])
    verdict = check_log(history)
    assert verdict.violations == {"nonmonotonic": 1, "skipped": 1}


def test_read_of_a_value_never_written() -> None:
    history = clean_log()
    history.read("drain", "t/1", 6, "ghost")
    assert check_log(history).violations == {"unexpected": 1}


def test_read_of_a_definitely_failed_send() -> None:
    history = clean_log()
    op = history.invoke("p0", "t/1", "refused")
    history.fail(op, "MSG_SIZE_TOO_LARGE")
    history.read("drain", "t/1", 6, "refused")
    verdict = check_log(history)
    assert verdict.violations == {"failed_but_read": 1}
    assert verdict.counts["failed"] == 1


def test_acked_after_names_sends_made_after_an_instant_that_were_acknowledged() -> None:
    history = History()
    before = history.invoke("p0", "t/0", "before")
    instant = history.events[-1]["t"]
    after, refused = history.invoke("p0", "t/0", "after"), history.invoke("p0", "t/0", "refused")
    history.ok(before, 0)
    history.ok(after, 1)
    history.info(refused, "storage error")
    assert acked_after(history, instant) == ["after"]


def test_unavailability_is_the_time_from_each_fault_to_the_next_acknowledgement() -> None:
    history = History([
        {"type": "invoke", "op": 0, "process": "p", "key": "k", "value": "a", "t": 1.0},
        {"type": "fault", "name": "kill9", "t": 2.0},
        {"type": "invoke", "op": 1, "process": "p", "key": "k", "value": "b", "t": 2.5},
        {"type": "ok", "op": 0, "offset": 0, "t": 5.0},
        {"type": "fault", "name": "pause", "t": 6.0},
        {"type": "info", "op": 1, "error": "timed out", "t": 9.0},
    ])
    assert unavailability(history) == [3.0, 3.0]  # the second never saw an ack: until the end


def test_too_few_acknowledgements_fail_the_run() -> None:
    with pytest.raises(AssertionError, match="only 12 acknowledged"):
        check_log(clean_log()).assert_ok(min_acked=100)


def test_history_round_trips_through_json_lines(tmp_path) -> None:
    history = clean_log()
    op = history.invoke("p9", "t/0", "pending")
    history.fault("kill9", pid=123)
    loaded = History.load(history.dump(tmp_path / "history.jsonl"))
    assert loaded.events == history.events
    assert check_log(loaded).counts == check_log(history).counts
    assert loaded.count("ok") == history.count("ok") == 12 and loaded.count("fault") == 1
    assert loaded.invoke("p9", "t/0", "next") == op + 1


# --- AMQP total queue ---------------------------------------------------------------------------


def queue_history(confirmed: int = 4) -> History:
    history = History()
    for index in range(confirmed):
        op = history.invoke("pub", "q", f"m{index}")
        history.ok(op)
    for index in range(confirmed):
        history.read("drain", "q", None, f"m{index}")
    return history


def test_queue_clean_with_redelivered_duplicate_and_recovered_unknown() -> None:
    history = queue_history()
    history.read("drain", "q", None, "m1", redelivered=True)
    op = history.invoke("pub", "q", "maybe")
    history.info(op, "connection lost")
    history.read("drain", "q", None, "maybe")
    verdict = check_queue(history, "amqp")
    verdict.assert_ok(min_acked=4)
    assert verdict.counts["duplicated"] == 1 and verdict.counts["recovered"] == 1
    assert verdict.counts["redelivered_unflagged"] == 0


def test_queue_lost_confirmed_message() -> None:
    history = queue_history()
    op = history.invoke("pub", "q", "confirmed-but-gone")
    history.ok(op)
    assert check_queue(history).violations == {"lost": 1}


def test_queue_unexpected_message_and_unflagged_duplicate() -> None:
    history = queue_history()
    history.read("drain", "q", None, "stranger")
    history.read("drain", "q", None, "m0")
    assert check_queue(history).violations == {"unexpected": 1, "redelivered_unflagged": 1}


# --- generated clean histories ------------------------------------------------------------------


@st.composite
def correct_logs(draw) -> History:
    """A history a correct partitioned log could produce: producers interleave, each send is
    acknowledged, fails, or ends unknown (then stored or not); readers read stretches in order."""
    history = History()
    partitions = [f"t/{index}" for index in range(draw(st.integers(1, 3)))]
    logs: dict[str, list[str]] = {key: [] for key in partitions}
    pending: list[tuple[int, str, str]] = []
    for step in range(draw(st.integers(0, 40))):
        process = f"p{draw(st.integers(0, 2))}"
        key = draw(st.sampled_from(partitions))
        value = f"{process}-{step}"
        pending.append((history.invoke(process, key, value), key, value))
        # The log stores a process's sends to a partition in order; completions may lag.
        while pending and draw(st.booleans()):
            op, key, value = pending.pop(0)
            outcome = draw(st.sampled_from(["ok", "ok", "ok", "fail", "info-stored", "info-lost"]))
            if outcome == "ok":
                history.ok(op, len(logs[key]))
                logs[key].append(value)
            elif outcome == "fail":
                history.fail(op, "refused")
            elif outcome == "info-stored":
                logs[key].append(value)
                history.info(op, "timed out")
            else:
                history.info(op, "timed out")
    for op, _, _ in pending:   # never completed: not stored
        history.info(op, "run ended")
    for reader in range(draw(st.integers(0, 2))):
        for key, log in logs.items():
            if log:
                start = draw(st.integers(0, len(log) - 1))
                end = draw(st.integers(start, len(log)))
                for offset in range(start, end):
                    history.read(f"c{reader}", key, offset, log[offset])
    for key, log in logs.items():
        for offset, value in enumerate(log):
            history.read("drain", key, offset, value)
    return history


@settings(max_examples=200, deadline=None)
@given(correct_logs())
def test_generated_correct_logs_raise_no_alarm(history: History) -> None:
    verdict = check_log(history)
    assert verdict.ok, verdict.line()
    assert verdict.counts["acked"] == sum(1 for send in history.sends() if send.status == "ok")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ok", "fail", "info-stored", "info-lost"]), st.integers(1, 3)),
                max_size=40), st.randoms())
def test_generated_at_least_once_queues_raise_no_alarm(sends, rng) -> None:
    history = History()
    delivered = []
    for index, (outcome, times) in enumerate(sends):
        op = history.invoke("pub", "q", f"m{index}")
        {"ok": history.ok, "fail": lambda op: history.fail(op, "nack")}.get(
            outcome, lambda op: history.info(op, "lost"))(op)
        if outcome in ("ok", "info-stored"):
            delivered += [f"m{index}"] * times
    rng.shuffle(delivered)
    seen: set[str] = set()
    for value in delivered:
        history.read("c", "q", None, value, redelivered=value in seen)
        seen.add(value)
    verdict = check_queue(history)
    assert verdict.ok, verdict.line()
    assert verdict.counts["redelivered_unflagged"] == 0

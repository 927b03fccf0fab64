"""The audit log's lines, and its bound on repeated refusals."""

from __future__ import annotations

import json

from core.audit import AuditLog


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def opened(tmp_path, clock: Clock, **kwargs) -> AuditLog:
    audit = AuditLog(wall=clock, monotonic=clock, **kwargs)
    audit.open(tmp_path / "audit.log", refusal_interval_s=60)
    return audit


def test_a_change_is_one_line_with_who_what_when_where_and_before_after(tmp_path) -> None:
    audit = opened(tmp_path, Clock())
    audit.change(who="root", source="127.0.0.1:5000", action="PUT /api/v1/permissions/t/ns/u",
                 target="permission t/ns/u", before=None, after={"write": ".*"}, status=200)
    audit.close()
    assert lines(tmp_path / "audit.log") == [{
        "time": "1970-01-01T00:16:40.000Z", "event": "change", "who": "root", "from": "127.0.0.1:5000",
        "action": "PUT /api/v1/permissions/t/ns/u", "target": "permission t/ns/u", "before": None,
        "after": {"write": ".*"}, "status": 200}]


def test_repeated_refusals_are_one_line_then_one_count_per_interval(tmp_path) -> None:
    clock = Clock()
    audit = opened(tmp_path, clock)
    for _ in range(1000):
        audit.refused("login", "kafka", "bob", "login", "bad credentials", "10.0.0.7:1")
        audit.refused("authorization", "kafka", "bob", "topic t/ns/orders", "WRITE", "10.0.0.7:1")
        clock.now += 0.01
    written = lines(tmp_path / "audit.log")
    assert [(w["kind"], w["count"]) for w in written] == [("login", 1), ("authorization", 1)]
    clock.now += 60
    audit.flush()
    written = lines(tmp_path / "audit.log")
    assert [(w["kind"], w["count"]) for w in written[2:]] == [("login", 999), ("authorization", 999)]
    assert written[2]["first"] == "1970-01-01T00:16:40.010Z"
    audit.refused("login", "kafka", "bob", "login", "bad credentials", "10.0.0.7:1")   # a new interval
    assert lines(tmp_path / "audit.log")[-1]["count"] == 1
    audit.close()


def test_keys_kept_are_bounded_and_nothing_counted_is_lost(tmp_path) -> None:
    audit = opened(tmp_path, Clock(), max_keys=10)
    for user in range(25):
        for _ in range(3):
            audit.refused("login", "amqp", f"u{user}", "login", "bad credentials", None)
    audit.close()
    written = lines(tmp_path / "audit.log")
    assert sum(w["count"] for w in written) == 75
    assert len(written) == 50


def test_a_closed_or_never_opened_log_writes_nothing(tmp_path) -> None:
    audit = AuditLog()
    audit.refused("login", "amqp", "u", "login", "bad credentials", None)
    audit.change(who="root", source=None, action="DELETE /x", target="x")
    assert not audit.enabled and list(tmp_path.iterdir()) == []


def test_names_that_change_every_time_are_bounded_by_lines_per_interval(tmp_path) -> None:
    clock = Clock()
    audit = opened(tmp_path, clock, max_lines=100)
    for user in range(5000):
        audit.refused("login", "kafka", f"scan{user}" + "x" * 1000, "login", "bad credentials", None)
    clock.now += 60
    audit.flush()
    written = lines(tmp_path / "audit.log")
    assert len(written) == 101
    assert written[-1] == {"time": written[-1]["time"], "event": "refused", "kind": "overflow", "count": 4900}
    assert max(len(w.get("user") or "") for w in written) == 256
    audit.close()


def test_an_attempt_that_changed_nothing_is_a_failed_event(tmp_path) -> None:
    audit = opened(tmp_path, Clock())
    audit.change(who="ada", source=None, action="PUT /api/v1/permissions/other/ns/u", target="x", status=404)
    audit.close()
    assert lines(tmp_path / "audit.log")[0]["event"] == "failed"

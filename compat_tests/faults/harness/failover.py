"""Failover time from a finished history: for each key (a partition), the time from its last
acknowledgement before a fault to its first acknowledgement after it."""

from __future__ import annotations

from compat_tests.faults.harness.history import FAULT, INVOKE, OK, History


def failover_times(history: History, fault: str) -> dict[str, float | None]:
    """Seconds per key around the first fault named `fault`; None for a key never acknowledged
    again. Keys with no acknowledgement before the fault are left out."""
    events = history.events
    fault_t = next(event["t"] for event in events if event["type"] == FAULT and event["name"] == fault)
    key_of = {event["op"]: event["key"] for event in events if event["type"] == INVOKE}
    before: dict[str, float] = {}
    after: dict[str, float] = {}
    for event in events:
        if event["type"] != OK:
            continue
        key = key_of[event["op"]]
        if event["t"] <= fault_t:
            before[key] = max(before.get(key, 0.0), event["t"])
        elif key not in after or event["t"] < after[key]:
            after[key] = event["t"]
    return {key: (after[key] - last if key in after else None) for key, last in sorted(before.items())}


def describe(times: dict[str, float | None]) -> str:
    return ", ".join(f"{key}: {'never' if t is None else f'{t:.2f}s'}" for key, t in times.items())

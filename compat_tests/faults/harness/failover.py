"""Failover time from a finished history: per key (a partition), the longest pause in its
acknowledgements that spans the fault, i.e. the last acknowledgement before the fault took effect ->
the first one after. Measured on acknowledgement times as the client reported them, so a client that
reports late only makes the figure larger."""

from __future__ import annotations

from compat_tests.faults.harness.history import FAULT, INVOKE, OK, History


def failover_times(history: History, fault: str) -> dict[str, float | None]:
    """Seconds per key for the first fault named `fault`, counting only pauses that began before the
    next fault event; None for a key never acknowledged again. Keys never acknowledged before the
    fault are left out."""
    events = history.events
    faults = [event["t"] for event in events if event["type"] == FAULT]
    start = next(event["t"] for event in events if event["type"] == FAULT and event["name"] == fault)
    end = min((t for t in faults if t > start), default=float("inf"))
    key_of = {event["op"]: event["key"] for event in events if event["type"] == INVOKE}
    acks: dict[str, list[float]] = {}
    for event in events:
        if event["type"] == OK:
            acks.setdefault(key_of[event["op"]], []).append(event["t"])
    times: dict[str, float | None] = {}
    for key, stamps in sorted(acks.items()):
        stamps.sort()
        if stamps[0] > start:
            continue
        if stamps[-1] <= start:
            times[key] = None
            continue
        times[key] = max(later - earlier for earlier, later in zip(stamps, stamps[1:])
                         if later > start - 1.0 and earlier < end)
    return times


def describe(times: dict[str, float | None]) -> str:
    return ", ".join(f"{key}: {'never' if t is None else f'{t:.2f}s'}" for key, t in times.items())


def ack_latencies(history: History, start: float, end: float) -> list[float]:
    """Seconds from invoke to acknowledgement of the sends invoked between the monotonic times
    `start` and `end`, sorted (e.g. the produce latency while a partition moves)."""
    invoked = {event["op"]: event["t"] for event in history.events
               if event["type"] == INVOKE and start <= event["t"] <= end}
    return sorted(event["t"] - invoked[event["op"]] for event in history.events
                  if event["type"] == OK and event["op"] in invoked)

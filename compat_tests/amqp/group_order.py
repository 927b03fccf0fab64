"""A checker of FIFO message groups, from what the consumers saw.

A history is a list of events in the order they happened (a consumer notes an ack or a nack before
it sends it, and a delivery after it arrives, so the order is causal across consumers):

    ("deliver", delivery, group, seq)    a message of `group`, the `seq`-th one published to it
    ("ack", delivery) / ("nack", delivery)   settled (a nack requeues)
    ("lost", delivery)                   its consumer's connection died with it unsettled

`delivery` is any key naming one delivery (consumer and delivery tag). The rules: a group has at
most one delivery outstanding; each delivery of a group is its first message not yet acknowledged
(so redeliveries come before the rest, nothing is skipped, nothing overtakes); every delivery is
settled once; in the end every published message was acknowledged exactly once.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping


def group_order_problems(published: Mapping[Hashable, list[int]], history: Iterable[tuple]) -> list[str]:
    """What the history breaks (empty: nothing). `published`: each group's seqs in publish order."""
    problems: list[str] = []
    next_index = {group: 0 for group in published}        # the group's first unacknowledged message
    outstanding: dict[Hashable, Hashable] = {}             # group -> its delivery not yet settled
    deliveries: dict[Hashable, tuple[Hashable, int]] = {}  # delivery -> (group, seq), while unsettled
    for event in history:
        kind, delivery = event[0], event[1]
        if kind == "deliver":
            group, seq = event[2], event[3]
            if group not in published:
                problems.append(f"delivery {delivery!r}: unknown group {group!r}")
                continue
            if group in outstanding:
                problems.append(f"delivery {delivery!r}: group {group!r} already has {outstanding[group]!r} out")
            expected = published[group][next_index[group]] if next_index[group] < len(published[group]) else None
            if seq != expected:
                problems.append(f"delivery {delivery!r}: group {group!r} got {seq}, expected {expected}")
            outstanding[group] = delivery
            deliveries[delivery] = (group, seq)
            continue
        if delivery not in deliveries:
            problems.append(f"{kind} of {delivery!r}, which is not outstanding")
            continue
        group, seq = deliveries.pop(delivery)
        if outstanding.get(group) == delivery:
            del outstanding[group]
        if kind == "ack" and next_index[group] < len(published[group]) and published[group][next_index[group]] == seq:
            next_index[group] += 1
        elif kind == "ack":
            problems.append(f"ack of {delivery!r}: group {group!r} seq {seq} out of order")
    for group, seqs in published.items():
        if next_index[group] < len(seqs):
            problems.append(f"group {group!r}: {len(seqs) - next_index[group]} of {len(seqs)} never acknowledged")
    return problems


def all_acknowledged(published: Mapping[Hashable, list[int]], history: list[tuple]) -> bool:
    """Cheap progress check while a test waits: as many acks as published messages."""
    return sum(1 for event in list(history) if event[0] == "ack") >= sum(len(seqs) for seqs in published.values())

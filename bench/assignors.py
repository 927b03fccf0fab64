"""Server-side assignors: partitions moved when one member joins or leaves, balance, and time.

For each assignor (core/groups/assignors), a group of N members subscribing to the same topics
gets an assignment; then one member joins (N+1) or one leaves (N-1, a member from the middle of
the order) and the assignment is computed again from the previous one. "Moved" counts the
partitions whose owner changed; the least any assignor can move is what the joiner must take
(about P/(N+1)) or what the leaver owned (about P/N). Spread is the largest minus the smallest
share. Results are averaged over N = 2..max_members.
"""

from __future__ import annotations

import argparse
import time

from core.groups.assignors import ASSIGNORS
from core.groups.assignors.spec import Assignment, Subscriber


def moved(before: Assignment, after: Assignment) -> int:
    owner = {tp: member for member, partitions in before.items() for tp in partitions}
    return sum(1 for member, partitions in after.items() for tp in partitions if owner.get(tp) != member)


def spread(assignment: Assignment) -> int:
    sizes = [len(p) for p in assignment.values()]
    return max(sizes) - min(sizes) if sizes else 0


def measure(name: str, topics: dict[str, tuple[None, ...]], max_members: int) -> dict[str, float]:
    assign = ASSIGNORS[name]
    total = sum(len(racks) for racks in topics.values())
    joins, leaves, least_join, least_leave, spreads, seconds, runs = 0, 0, 0, 0, 0, 0.0, 0
    for count in range(2, max_members + 1):
        members = {f"member-{i:03d}": Subscriber(frozenset(topics)) for i in range(count)}
        start = time.perf_counter()
        before = assign(members, topics, {})
        seconds += time.perf_counter() - start
        spreads += spread(before)
        joined = assign(members | {"member-new": Subscriber(frozenset(topics))}, topics, before)
        joins += moved(before, joined)
        least_join += len(joined["member-new"])
        leaver = sorted(members)[count // 2]
        left = assign({m: s for m, s in members.items() if m != leaver}, topics, before)
        leaves += moved(before, left)
        least_leave += len(before[leaver])
        runs += 1
    return {"join": joins / runs, "least_join": least_join / runs, "leave": leaves / runs,
            "least_leave": least_leave / runs, "spread": spreads / runs, "ms": seconds / runs * 1000,
            "partitions": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=24, help="partitions per topic")
    parser.add_argument("--max-members", type=int, default=16)
    args = parser.parse_args()
    topics = {f"topic-{t}": (None,) * args.partitions for t in range(args.topics)}
    print(f"{args.topics} topics x {args.partitions} partitions, members 2..{args.max_members} (averages)")
    print(f"{'assignor':<16}{'moved/join':>11}{'(least)':>9}{'moved/leave':>13}{'(least)':>9}"
          f"{'spread':>8}{'ms':>8}")
    for name in ASSIGNORS:
        r = measure(name, topics, args.max_members)
        print(f"{name:<16}{r['join']:>11.1f}{r['least_join']:>9.1f}{r['leave']:>13.1f}{r['least_leave']:>9.1f}"
              f"{r['spread']:>8.1f}{r['ms']:>8.2f}")


if __name__ == "__main__":
    main()

"""Checkers over a finished history, after the ones Jepsen uses for Kafka and for queues.

`check_log` (Kafka-like partitioned logs; jepsen.tests.kafka's error types):
- lost: acknowledged, never read (the final drain reads every partition from offset 0);
- duplicated: one value at two positions (two offsets, or two partitions);
- inconsistent: one (partition, offset) holding two values, across all reads and acknowledgements;
- reordered: one producer's acknowledged values on one partition whose offsets are not in the order
  it sent them (an idempotent producer guarantees that order);
- nonmonotonic / skipped: one reader's offsets on one partition going back, or jumping a gap
  (each consumer instance is its own reader and reads with `assign`, so both are errors);
- unexpected: a value read that no producer ever sent;
- failed_but_read: a value read although its send definitely failed (Jepsen's G1a).

`check_queue` (AMQP; Jepsen's total-queue): what was confirmed must come out. lost and unexpected
must be 0; duplicates are counted apart since AMQP delivery is at least once, but with one broker
owning the queue throughout (one gateway, restarted or not) a duplicate must carry the redelivered
flag: one without it means the broker forgot it had handed the message out. Where the queue moves
between live brokers it is only reported (an owner paused past its term may still hand out, on
waking, what it had read ahead).

Each returns a `Verdict`: the counts, which of them must be 0, and a few examples of each anomaly.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from compat_tests.faults.harness.history import FAIL, FAULT, INFO, INVOKE, OK, History

EXAMPLES = 5


@dataclass
class Verdict:
    name: str
    counts: dict[str, int]
    must_be_zero: tuple[str, ...]
    examples: dict[str, list] = field(default_factory=dict)

    @property
    def violations(self) -> dict[str, int]:
        return {name: self.counts[name] for name in self.must_be_zero if self.counts[name]}

    @property
    def ok(self) -> bool:
        return not self.violations

    def line(self) -> str:
        """The one grep-able result line: `name: acked=N lost=0 ...`."""
        return f"{self.name}: " + " ".join(f"{name}={value}" for name, value in self.counts.items())

    def assert_ok(self, min_acked: int = 1) -> None:
        """Fail on any must-be-zero count, and on a run too thin to mean anything."""
        problems = [f"{name}={count} e.g. {self.examples.get(name, [])[:EXAMPLES]}"
                    for name, count in self.violations.items()]
        if self.counts["acked"] < min_acked:
            problems.append(f"only {self.counts['acked']} acknowledged sends (at least {min_acked} needed)")
        assert not problems, f"{self.line()}\n" + "\n".join(problems)


def check_log(history: History, name: str = "log", *, idempotent: bool = True) -> Verdict:
    sends, reads = history.sends(), history.reads()
    acked = [send for send in sends if send.status == OK]
    examples: dict[str, list] = defaultdict(list)

    # Every (partition, offset) -> value observation: reads, and the offsets acknowledgements named.
    at_offset: dict[tuple[str, int], set[str]] = defaultdict(set)
    positions: dict[str, set[tuple[str, int]]] = defaultdict(set)
    observations = [(send.key, send.offset, send.value) for send in acked if send.offset is not None]
    observations += [(read.key, read.offset, read.value) for read in reads if read.offset is not None]
    for key, offset, value in observations:
        at_offset[(key, offset)].add(value)
        positions[value].add((key, offset))
    inconsistent = {where: sorted(values) for where, values in at_offset.items() if len(values) > 1}
    duplicated = {value: sorted(where) for value, where in positions.items() if len(where) > 1}

    read_values = {read.value for read in reads}
    attempted = {send.value for send in sends}
    failed = {send.value for send in sends if send.status == FAIL}
    lost = [send for send in acked if send.value not in read_values]
    unexpected = sorted(read_values - attempted)
    failed_but_read = sorted(read_values & failed)
    unknown = [send for send in sends if send.status in (INFO, INVOKE)]

    reordered = _reordered(acked)
    nonmonotonic, skipped = _poll_order(reads)

    for label, items in (("lost", lost), ("inconsistent", list(inconsistent.items())),
                         ("duplicated", list(duplicated.items())), ("unexpected", unexpected),
                         ("failed_but_read", failed_but_read), ("reordered", reordered),
                         ("nonmonotonic", nonmonotonic), ("skipped", skipped)):
        examples[label] = list(items)[:EXAMPLES]
    counts = {
        "acked": len(acked),
        "failed": len(failed),
        "unknown": len(unknown),
        "recovered": sum(1 for send in unknown if send.value in read_values),
        "reads": len(reads),
        "lost": len(lost),
        "duplicated": len(duplicated),
        "inconsistent": len(inconsistent),
        "reordered": len(reordered),
        "nonmonotonic": len(nonmonotonic),
        "skipped": len(skipped),
        "unexpected": len(unexpected),
        "failed_but_read": len(failed_but_read),
        "faults": len(history.faults()),
    }
    must_be_zero = ("lost", "inconsistent", "reordered", "nonmonotonic", "skipped", "unexpected",
                    "failed_but_read") + (("duplicated",) if idempotent else ())
    return Verdict(name, counts, must_be_zero, dict(examples))


def _reordered(acked) -> list[tuple[str, str, str]]:
    """(process, partition): acknowledged sends in send order must have increasing offsets.
    Returns (value, value it overtook, partition) for each send stored before an earlier one."""
    by_stream: dict[tuple[str, str], list] = defaultdict(list)
    for send in acked:
        if send.offset is not None:
            by_stream[(send.process, send.key)].append(send)
    found = []
    for (_, key), stream in by_stream.items():
        stream.sort(key=lambda send: send.op)
        highest = None
        for send in stream:
            if highest is not None and send.offset < highest.offset:
                found.append((send.value, highest.value, key))
            elif highest is None or send.offset > highest.offset:
                highest = send
    return found


def _poll_order(reads) -> tuple[list, list]:
    """Per reader and partition, offsets read must go up by exactly one each time."""
    last: dict[tuple[str, str], int] = {}
    nonmonotonic, skipped = [], []
    for read in reads:
        if read.offset is None:
            continue
        stream = (read.reader, read.key)
        previous = last.get(stream)
        if previous is not None:
            if read.offset <= previous:
                nonmonotonic.append((read.reader, read.key, previous, read.offset))
            elif read.offset > previous + 1:
                skipped.append((read.reader, read.key, previous, read.offset))
        last[stream] = read.offset
    return nonmonotonic, skipped


def check_queue(history: History, name: str = "queue") -> Verdict:
    sends, reads = history.sends(), history.reads()
    attempted = {send.value for send in sends}
    confirmed = {send.value for send in sends if send.status == OK}
    nacked = {send.value for send in sends if send.status == FAIL}
    unknown = {send.value for send in sends if send.status in (INFO, INVOKE)}
    dequeued = Counter(read.value for read in reads)

    lost = sorted(confirmed - dequeued.keys())
    unexpected = sorted(dequeued.keys() - attempted)
    duplicated = sorted(value for value, times in dequeued.items() if times > 1)
    # A duplicate delivered without the redelivered flag means the broker forgot it had handed it out.
    seen: set[str] = set()
    unflagged = []
    for read in reads:
        if read.value in seen and not read.redelivered:
            unflagged.append(read.value)
        seen.add(read.value)
    counts = {
        "acked": len(confirmed),
        "failed": len(nacked),
        "unknown": len(unknown),
        "recovered": len(unknown & dequeued.keys()),
        "reads": len(reads),
        "lost": len(lost),
        "duplicated": len(duplicated),
        "unexpected": len(unexpected),
        "nacked_but_delivered": len(nacked & dequeued.keys()),
        "redelivered_unflagged": len(unflagged),
        "faults": len(history.faults()),
    }
    examples = {"lost": lost[:EXAMPLES], "unexpected": unexpected[:EXAMPLES], "duplicated": duplicated[:EXAMPLES],
                "redelivered_unflagged": unflagged[:EXAMPLES]}
    return Verdict(name, counts, ("lost", "unexpected", "redelivered_unflagged"), examples)


def acked_after(history: History, instant: float) -> list[str]:
    """Values acknowledged although they were sent after `instant` (a time.monotonic() value), e.g.
    after the storage turned read-only: must be empty."""
    events = history.events
    invoked = {event["op"]: event for event in events if event["type"] == INVOKE}
    return [invoked[event["op"]]["value"] for event in events
            if event["type"] == OK and invoked[event["op"]]["t"] > instant]


def unavailability(history: History) -> list[float]:
    """For each fault, seconds from it to the next acknowledgement (liveness: reported, never a
    pass/fail bar). A fault never followed by an acknowledgement counts until the last event."""
    events = history.events
    acks = [event["t"] for event in events if event["type"] == OK]
    end = events[-1]["t"] if events else 0.0
    gaps = []
    for fault in (event for event in events if event["type"] == FAULT):
        gaps.append(next((t for t in acks if t > fault["t"]), end) - fault["t"])
    return gaps

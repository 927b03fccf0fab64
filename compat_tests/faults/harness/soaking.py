"""What every soak shares: its command line, and the report that ends it.

    options = soak_options("soak", __doc__, argv, every=(3.0, 8.0))   # minutes, rng, out, every
    ...
    return soak_report("soak", options.minutes, counts, verdicts, histories)   # the exit status
"""

from __future__ import annotations

import argparse
import random
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from compat_tests.faults.harness.checkers import Verdict, unavailability
from compat_tests.faults.harness.history import History


@dataclass(frozen=True)
class SoakOptions:
    minutes: float
    rng: random.Random
    out: Path
    every: tuple[float, float]


def soak_options(name: str, doc: str, argv: list[str] | None, *, every: tuple[float, float]) -> SoakOptions:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=random.randrange(1 << 32))
    parser.add_argument("--out", type=Path, default=None, help="where histories and logs stay")
    parser.add_argument("--every", type=float, nargs=2, default=every, metavar=("MIN_S", "MAX_S"),
                        help="seconds of calm between faults")
    parsed = parser.parse_args(argv)
    out = parsed.out or Path(tempfile.mkdtemp(prefix=f"{name}-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"{name}: seed={parsed.seed} minutes={parsed.minutes} out={out}", flush=True)
    return SoakOptions(parsed.minutes, random.Random(parsed.seed), out, tuple(parsed.every))


def soak_report(name: str, minutes: float, counts: Counter[str], verdicts: Sequence[Verdict],
                histories: Sequence[History]) -> int:
    """Print every verdict, the unavailability after faults and the totals; 1 on any violation (or
    when the run broke off before a verdict), else 0."""
    for verdict in verdicts:
        print(verdict.line())
    gaps = sorted(gap for history in histories for gap in unavailability(history))
    if gaps:
        print(f"{name}: unavailable after a fault (s): p50={gaps[len(gaps) // 2]:.1f} "
              f"p95={gaps[int(len(gaps) * 0.95)]:.1f} max={gaps[-1]:.1f}")
    violations = {verdict.name: verdict.violations for verdict in verdicts if not verdict.ok}
    totals = " ".join(f"{fault}={count}" for fault, count in sorted(counts.items()))
    print(f"{name}: minutes={minutes} faults={sum(counts.values())} {totals} "
          f"acked={sum(v.counts['acked'] for v in verdicts)} lost={sum(v.counts['lost'] for v in verdicts)} "
          f"violations={violations or (0 if verdicts else 'no verdict: the run broke off')}")
    return 1 if violations or not verdicts else 0

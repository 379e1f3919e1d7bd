"""Bisection over candidates 0..n-1 where 0 is known good and n-1 known bad, as ``git bisect`` does.

The oracle says, for one candidate, good, bad or skip (untestable). A skipped candidate is never asked
again; the next probe is the untested one closest to the middle of the remaining range. When only skipped
candidates are left between the last good and the first bad, the culprit is one of them or the first bad:
the outcome lists those suspects instead of naming one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

GOOD, BAD, SKIP = "good", "bad", "skip"


@dataclasses.dataclass(frozen=True)
class Verdict:
    kind: str  # GOOD, BAD or SKIP
    detail: str = ""  # why it was skipped, or what the candidate measured

    def __post_init__(self) -> None:
        if self.kind not in (GOOD, BAD, SKIP):
            raise ValueError(f"verdict must be {GOOD!r}, {BAD!r} or {SKIP!r}, got {self.kind!r}")


@dataclasses.dataclass
class Outcome:
    last_good: int
    suspects: list[int]  # the first bad is one of these; the last one is known bad
    verdicts: dict[int, Verdict]  # every candidate the oracle was asked about, by index

    @property
    def first_bad(self) -> int | None:
        """The first bad candidate, or None when skipped candidates hide it among the suspects."""
        return self.suspects[0] if len(self.suspects) == 1 else None


def next_probe(last_good: int, first_bad: int, verdicts: dict[int, Verdict]) -> int | None:
    """The untested candidate strictly between the two closest to their middle (the lower on a tie)."""
    untested = [i for i in range(last_good + 1, first_bad) if i not in verdicts]
    if not untested:
        return None
    middle = (last_good + first_bad) / 2
    return min(untested, key=lambda i: (abs(i - middle), i))


def bisect(count: int, oracle: Callable[[int], Verdict]) -> Outcome:
    """Search candidates 0..count-1; the oracle is never asked about 0 (good) or count-1 (bad)."""
    if count < 2:
        raise ValueError(f"bisection needs a good and a bad candidate, got {count} candidate(s)")
    last_good, first_bad = 0, count - 1
    verdicts: dict[int, Verdict] = {}
    while (probe := next_probe(last_good, first_bad, verdicts)) is not None:
        verdict = oracle(probe)
        verdicts[probe] = verdict
        if verdict.kind == GOOD:
            last_good = probe
        elif verdict.kind == BAD:
            first_bad = probe
    return Outcome(last_good, list(range(last_good + 1, first_bad + 1)), verdicts)

"""From candidates to an answer: measure both endpoints, then bisect on "same signature as good or not".

The answer is one of
  Change    the first candidate whose signature differs from good's, and the last one equal to it;
  NoChange  good and bad have the same signature: nothing to find.
Anything else is a BisectError with a one-line reason: an endpoint is untestable, or skipped candidates
hide the first changed one (its message lists the suspects).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from compile_audit.artifacts.records import CaseRecord
from gate_tools.bisect.search import BAD, GOOD, SKIP, Outcome, Verdict, bisect
from gate_tools.bisect.signature import Signature, signature_of, untestable_reason


class BisectError(Exception):
    """A run that cannot name a culprit; the message is one line."""


@dataclasses.dataclass(frozen=True)
class Candidate:
    key: str  # what the lab installs: a commit SHA or a version
    label: str  # what is printed: "torch 2.12.0", "1a2b3c4d5e6f FIX Something (#123)"


@dataclasses.dataclass
class Measurement:
    case: CaseRecord | None  # the case's record in the report
    untestable: str | None = None  # why this candidate says nothing; None when the case was audited
    report: Path | None = None

    @classmethod
    def failed(cls, why: str, report: Path | None = None) -> Measurement:
        return cls(None, why, report)

    @classmethod
    def of_case(cls, case: CaseRecord | None, report: Path | None = None) -> Measurement:
        return cls(case, untestable_reason(case), report)

    @property
    def signature(self) -> Signature | None:
        return None if self.untestable or self.case is None else signature_of(self.case)

    def summary(self) -> str:
        return f"untestable: {self.untestable}" if self.untestable else self.signature.summary()


@dataclasses.dataclass
class Change:
    candidates: list[Candidate]
    outcome: Outcome
    measurements: dict[int, Measurement]

    @property
    def first_bad(self) -> Candidate:
        return self.candidates[self.outcome.suspects[0]]

    @property
    def last_good(self) -> Candidate:
        return self.candidates[self.outcome.last_good]

    @property
    def before(self) -> Measurement:
        return self.measurements[self.outcome.last_good]

    @property
    def after(self) -> Measurement:
        return self.measurements[self.outcome.suspects[0]]


@dataclasses.dataclass
class NoChange:
    candidates: list[Candidate]
    measurements: dict[int, Measurement]


Measure = Callable[[Candidate], Measurement]
Progress = Callable[[Candidate, Measurement, str], None]


def verdict_of(measurement: Measurement, good: Signature) -> Verdict:
    if measurement.untestable:
        return Verdict(SKIP, measurement.untestable)
    return Verdict(GOOD if measurement.signature == good else BAD, measurement.summary())


def _endpoint(role: str, candidate: Candidate, measurement: Measurement) -> Signature:
    if measurement.untestable:
        raise BisectError(f"{role} {candidate.label} is untestable: {measurement.untestable}")
    return measurement.signature


def _undecided(candidates: list[Candidate], outcome: Outcome) -> BisectError:
    good = candidates[outcome.last_good].label
    suspects = ", ".join(candidates[i].label for i in outcome.suspects)
    skipped = len(outcome.suspects) - 1
    return BisectError(
        f"no single culprit: {skipped} untestable candidate(s) after {good}; "
        f"the first changed one is one of: {suspects}"
    )


VERDICT_WORDS = {GOOD: "same as good", BAD: "changed", SKIP: "untestable"}


def find_change(candidates: list[Candidate], measure: Measure, progress: Progress | None = None) -> Change | NoChange:
    """Measure good (first) and bad (last), then bisect the rest; BisectError when no answer is possible.

    ``progress(candidate, measurement, word)`` is called after each measurement; word is "reference" for
    good, else "same as good", "changed" or "untestable".
    """
    if len(candidates) < 2:
        raise BisectError(f"bisection needs a good and a bad candidate, got {len(candidates)}")
    measurements: dict[int, Measurement] = {}

    def measure_at(index: int, good: Signature | None) -> Measurement:
        measurements[index] = measurement = measure(candidates[index])
        if progress:
            word = "reference" if good is None else VERDICT_WORDS[verdict_of(measurement, good).kind]
            progress(candidates[index], measurement, word)
        return measurement

    last = len(candidates) - 1
    good = _endpoint("good", candidates[0], measure_at(0, None))
    bad = _endpoint("bad", candidates[last], measure_at(last, good))
    if bad == good:
        return NoChange(candidates, measurements)
    outcome = bisect(len(candidates), lambda index: verdict_of(measure_at(index, good), good))
    if outcome.first_bad is None:
        raise _undecided(candidates, outcome)
    return Change(candidates, outcome, measurements)

"""Mark the failed cases of compile reports as known failures in the budgets file, each with the reason the run
gave: where Dynamo hit its recompile limit (frame, phase, last failing guard), the error a case raised, or the
first check it failed (outputs differ from eager, a saved adapter is missing keys).

    pytest --full-matrix -k "lifecycle" --update-budgets --compile-report out/lifecycle.json
    python scripts/record_known_failures.py out/lifecycle.json            # what it would mark
    python scripts/record_known_failures.py out/lifecycle.json --write    # mark them

Run it after recording a new part of the matrix, never to silence a regression: a known failure holds only what its
known_* field names (from the report's fields: the frame at the limit, the type raised, the check's name), xfails
while that happens and fails the run once it no longer does. Each reason it writes starts with "proposed: ", and
tests/test_budgets_file.py fails until a person rewrites it in their own words; where a cause's known_failures name
every problem an entry holds, it writes no reason (the cause is the reason). Cases over budget are not marked
(record their budget with --update-budgets). An existing known failure is kept, and extended where the case now
also fails on a problem it does not hold (see ``extended``). Exit status: 0, or 2 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from compile_audit.artifacts.records import CaseRecord
from compile_audit.artifacts.report import read_cases
from compile_audit.files import exclusive
from compile_audit.frames import Guard
from compile_audit.normalize import normalize, without_ids, without_lines
from compile_audit.rules.budgets import (
    PROPOSED_REASON,
    Budget,
    BudgetFile,
    BudgetFileError,
    known_failure_identities,
)
from compile_audit.rules.causes import Cause
from compile_audit.rules.verdict import BUDGET_KINDS as VERDICT_BUDGET_KINDS
from compile_audit.rules.verdict import limit_frame
from gate_tools import checkout

ROOT = checkout.find() or Path()  # the budgets file of the checkout, else of the current directory


def limit_reason(case: CaseRecord) -> str | None:
    hits = case.recompiles.limit_hits
    if not hits:
        return None
    first = hits[0]
    guard = without_ids(Guard.parse(first.last_guard).without_entry())
    more = f" (and {len(hits) - 1} more frame(s))" if len(hits) > 1 else ""
    return (
        f"Dynamo hits its {first.limit} on {limit_frame(first.frame)} and runs it eagerly from then "
        f"on{more}; last failing guard {normalize(guard)}"
    )


def error_reason(case: CaseRecord) -> str | None:
    """The exception of a case that raised, from its record: 'raises RuntimeError: ...' (a distributed case's
    RankFailed carries the rank's own error in its message)."""
    if not case.raised:
        return None
    error = without_lines(case.error or "")[:400]
    return f"raises {case.raised}: {error}" if error else f"raises {case.raised}"


def check_reason(case: CaseRecord) -> str | None:
    """The verdict's first problem, in its stable one-line summary, unless a budget problem is among them: those
    get a budget (--update-budgets), not a known failure."""
    problems = case.problems
    if not problems or any(p.kind in BUDGET_KINDS for p in problems):
        return None
    return f"fails: {(problems[0].summary or problems[0].kind)[:400]}"


def reason_for(case: CaseRecord) -> str | None:
    """Why a failed case failed, or None when the report gives no reason a known failure could quote."""
    return limit_reason(case) or error_reason(case) or check_reason(case)


BUDGET_KINDS = frozenset(kind.value for kind in VERDICT_BUDGET_KINDS)  # the verdict's, by the report's names


def held_by(case: CaseRecord) -> dict[str, str | tuple[str, ...]] | None:
    """The known_* fields that would hold the case's failure, from the report's fields (never its message): the
    frames at the recompile limit and the checks it failed, or the type it raised; None when a budget problem is
    among its problems (that gets a budget) or nothing names what failed."""
    if case.raised:
        return {"known_raises": case.raised}
    if any(p.kind in BUDGET_KINDS or p.kind == "missed break" for p in case.problems):
        return None
    frames = {limit_frame(hit.frame) for hit in case.recompiles.limit_hits}
    checks = {name for p in case.problems if p.kind != "recompile limit" for name in p.names}
    held = {"known_recompile_limit": tuple(sorted(frames)), "known_check": tuple(sorted(checks))}
    return {field: names for field, names in held.items() if names} or None


def extended(
    case_id: str, previous: Budget, held: dict[str, str | tuple[str, ...]], reason: str, causes: dict[str, Cause]
) -> Budget | None:
    """A known failure that now fails on more than it holds (a second frame at the recompile limit, a check): the
    entry holding those too, or None when it already holds them all (or holds a raise, which ends the case). The
    entry's reason stays where a cause names each added problem (``known_failures``); otherwise it becomes a
    proposed one that quotes the old, so that a person reviews the widening."""
    if previous.known_raises or "known_raises" in held:
        return None
    added = {
        field: tuple(name for name in held.get(field, ()) if name not in getattr(previous, field))
        for field in ("known_recompile_limit", "known_check")
    }
    if not any(added.values()):
        return None
    entry = dataclasses.replace(
        previous, **{field: (*getattr(previous, field), *names) for field, names in added.items()}
    )
    if previous.known_failure or not named_by_causes(case_id, dataclasses.replace(previous, **added), causes):
        widened = f"{PROPOSED_REASON}{previous.known_reason}; now also: {reason}"
        entry = dataclasses.replace(entry, known_failure=widened)
    return entry


def named_by_causes(case_id: str, entry: Budget, causes: dict[str, Cause]) -> bool:
    """Every problem the entry holds is one a cause's ``known_failures`` names: the cause is its reason."""
    identities = known_failure_identities(case_id, entry)
    return all(any(cause.explains_known_failure(i) for cause in causes.values()) for i in identities)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/record_known_failures.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("reports", nargs="+", help="compile reports (--compile-report)")
    parser.add_argument("--budgets", default=str(ROOT / "tests" / "compile_budgets.toml"))
    parser.add_argument("--write", action="store_true", help="write the entries (default: print them)")
    args = parser.parse_args(argv)
    try:
        cases = [case for path in args.reports for case in read_cases(path).cases]
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    marks, unmarked = {}, []
    for case in cases:
        if case.status not in ("failed", "error"):
            continue
        reason, held = reason_for(case), held_by(case)
        if reason and held:
            marks[case.id] = (reason, held)
        else:
            unmarked.append(case.id)
    try:
        with exclusive(Path(args.budgets)):
            budgets = BudgetFile.load(Path(args.budgets), missing_ok=True)
            added = []
            for case_id, (reason, held) in sorted(marks.items()):
                previous = budgets.entries.get(case_id)
                if previous is not None and previous.known:
                    entry = extended(case_id, previous, held, reason, budgets.causes)
                    if entry is None:
                        continue
                    verb = "extended"
                else:
                    entry = dataclasses.replace(previous or Budget(), recorded=True, **held)
                    if not named_by_causes(case_id, entry, budgets.causes):
                        entry = dataclasses.replace(entry, known_failure=PROPOSED_REASON + reason)
                    verb = "marked"
                budgets.entries[case_id] = entry
                added.append(case_id)
                fields = ", ".join(f"{field} = {value!r}" for field, value in held.items())
                print(f"{case_id}: {verb}: {fields}: {reason}")
            if args.write and added:
                budgets.write()
    except BudgetFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    verb = "marked" if args.write else "would mark"
    print(f"{verb} {len(added)} known failure(s) in {args.budgets}")
    for case_id in unmarked:
        print(f"not marked (over budget, or no reason found; see its message): {case_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

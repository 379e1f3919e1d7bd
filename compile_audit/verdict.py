"""The verdict of one case: one function over structured findings, never over message text.

Problems, in the order a failure message lists them:

- ``RECOMPILE_LIMIT``: Dynamo gave up on a frame and runs it eagerly. Fails whatever the budget;
  only a ``known_failure`` holds it, and such a run never feeds the ratchet.
- ``OVER_BUDGET``: more graph breaks / recompiles / unexpected recompiles / DDP splits than the budget allows.
- ``NEW_SIGNATURE``: a break or unexpected-recompile signature the budget does not list, even within
  the counts.
- ``STEADY_STATE``: a phase compiled after the scenario's first full cycle.
- ``CHECK``: a scenario's own check failed (parity with eager, weights, gradients ...).
- ``TIGHTEN``: the ratchet; the case beat its budget (counts or vanished signatures). A failure when
  the installed versions equal those the budgets file records, else a warning.

With ``updating`` (``--update-budgets``) the budget's own problems (over, new signature, tighten)
are not failures: the budget is being rewritten from this run.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from compile_audit.budgets import Budget, Observed, compare
from compile_audit.result import AuditResult

MAX_LISTED = 15  # recompiles listed in a failure message; the JSON report has all


class Kind(enum.Enum):
    RECOMPILE_LIMIT = "recompile limit"
    OVER_BUDGET = "over budget"
    NEW_SIGNATURE = "new signature"
    STEADY_STATE = "steady state"
    CHECK = "check"
    TIGHTEN = "tighten"


BUDGET_KINDS = frozenset({Kind.OVER_BUDGET, Kind.NEW_SIGNATURE, Kind.TIGHTEN})


@dataclasses.dataclass(frozen=True)
class Problem:
    kind: Kind
    text: str  # one section of the failure message


@dataclasses.dataclass(frozen=True)
class Verdict:
    status: str  # "passed" | "failed" | "xfailed"
    message: str  # the failure (or known-failure) text; "" when passed
    problems: tuple[Problem, ...]
    warnings: tuple[str, ...] = ()

    @property
    def feeds_budget(self) -> bool:
        """Whether ``--update-budgets`` may record this run: not when Dynamo gave up (its counts collapsed)."""
        return not any(p.kind is Kind.RECOMPILE_LIMIT for p in self.problems)


def observed(result: AuditResult) -> Observed:
    return Observed(
        graph_breaks=result.graph_break_count,
        recompiles=len(result.recompiles),
        unexpected_recompiles=len(result.unexpected_recompiles),
        break_signatures=tuple(sorted(result.break_signatures)),
        recompile_signatures=tuple(sorted(result.recompile_signatures)),
        ddp_splits=result.ddp_split_count,
    )


def _over_budget(result: AuditResult, budget: Budget, over: list[str], where: str) -> Problem:
    section = [f"over budget ({where}): " + "; ".join(over)]
    if result.graph_break_count > budget.graph_breaks:
        section += ["graph breaks:", *(f"  {line}" for line in result.describe_breaks())]
    if result.ddp_split_count > budget.ddp_splits:
        section.append("ddp splits (DDPOptimizer, at gradient bucket boundaries; not graph breaks):")
        section += [f"  [{phase}] {split.describe()}" for phase, split in result.ddp_splits]
    if result.recompiles:
        section.append("recompiles:")
        section += [f"  {r.describe()}" for r in result.recompiles[:MAX_LISTED]]
        hidden = len(result.recompiles) - MAX_LISTED
        if hidden > 0:
            section.append(f"  ... {hidden} more recompiles (all of them in --compile-report)")
    if budget.note:
        section.append(f"budget note: {budget.note}")
    return Problem(Kind.OVER_BUDGET, "\n".join(section))


def _new_signatures(result: AuditResult, budget: Budget, where: str) -> Problem | None:
    if not budget.recorded:  # no entry: the default budget allows no break and no unexpected recompile
        return None
    lines = []
    for signature, brk in result.break_signatures.items():
        if signature not in budget.break_signatures:
            lines.append(f"  new graph break {signature!r} at {brk.location}: {brk.reason}")
    for signature, recompile in result.recompile_signatures.items():
        if signature not in budget.recompile_signatures:
            lines.append(f"  new unexpected recompile {signature!r}: {recompile.describe()}")
    if not lines:
        return None
    head = f"not in the budget ({where}), though the counts may be within it:"
    return Problem(Kind.NEW_SIGNATURE, "\n".join([head, *lines]))


def _tighten(result: AuditResult, budget: Budget, under: list[str], where: str) -> Problem | None:
    vanished = []
    if budget.recorded:
        vanished += [f"graph break {s!r} is gone" for s in budget.break_signatures if s not in result.break_signatures]
        vanished += [
            f"unexpected recompile {s!r} is gone"
            for s in budget.recompile_signatures
            if s not in result.recompile_signatures
        ]
    if not (under or vanished):
        return None
    return Problem(
        Kind.TIGHTEN,
        f"tighten the budget ({where}): "
        + "; ".join(under + vanished)
        + " -- run `pytest --update-budgets` for this case and commit the file",
    )


def _steady_state(result: AuditResult) -> Problem | None:
    steady = result.steady_state_compiles
    if not steady:
        return None
    lines = [
        f"steady state broken: after phase {result.steady_state_from!r} a full cycle had run,"
        " yet these phases compiled again:"
    ]
    for phase in steady:
        lines.append(f"  [{phase.name}] {phase.frames_compiled} frame(s) compiled")
        lines += [f"    {r.describe()}" for r in phase.recompiles]
    return Problem(Kind.STEADY_STATE, "\n".join(lines))


def _recompile_limit(result: AuditResult) -> Problem | None:
    hits = result.limit_hits
    if not hits:
        return None
    lines = [
        f"Dynamo hit its recompile limit on {len(hits)} frame(s) and runs them eagerly from then on, silently;"
        " the counts of this run are not comparable with the budget (no budget can allow this):"
    ]
    lines += [f"  {hit.describe()}" for hit in hits]
    return Problem(Kind.RECOMPILE_LIMIT, "\n".join(lines))


def headline(case_id: str, result: AuditResult, budget: Budget) -> str:
    seen = observed(result)
    allowed = "expected only" if budget.recompiles is None else budget.recompiles
    splits = f", ddp splits {seen.ddp_splits}/{budget.ddp_splits}" if seen.ddp_splits or budget.ddp_splits else ""
    return (
        f"{case_id}: graph breaks {seen.graph_breaks}/{budget.graph_breaks}{splits}, "
        f"recompiles {seen.recompiles}/{allowed}"
        f" ({seen.unexpected_recompiles} unexpected, budget {budget.unexpected_recompiles})"
    )


def judge(
    case_id: str,
    result: AuditResult,
    budget: Budget,
    *,
    checks: Sequence[str] = (),
    where: str = "budgets file",
    strict_ratchet: bool = True,
    updating: bool = False,
) -> Verdict:
    """The case's verdict. ``checks``: the scenario's own failed checks; ``where``: the budget entry's
    ``file:line`` (or why the default applies); ``strict_ratchet``: the installed versions equal those the
    budgets file records."""
    counts = compare(observed(result), budget)
    limit = _recompile_limit(result)
    candidates = [
        limit,
        _over_budget(result, budget, counts.over, where) if counts.over else None,
        _new_signatures(result, budget, where),
        _steady_state(result),
        *(Problem(Kind.CHECK, text) for text in checks),
        None if limit else _tighten(result, budget, counts.under, where),
    ]
    problems = [p for p in candidates if p is not None and not (updating and p.kind in BUDGET_KINDS)]
    warnings = []
    if not strict_ratchet:
        warnings = [p.text for p in problems if p.kind is Kind.TIGHTEN]
        problems = [p for p in problems if p.kind is not Kind.TIGHTEN]
    if budget.known_failure:
        if problems:
            first = problems[0].text.splitlines()[0]
            return Verdict("xfailed", f"known failure ({budget.known_failure}); today: {first}", tuple(problems))
        message = (
            f"{case_id} passes now, but {where} records it as a known failure ({budget.known_failure}):"
            " remove known_failure from the entry"
        )
        return Verdict("failed", message, (Problem(Kind.CHECK, message),), tuple(warnings))
    if not problems:
        return Verdict("passed", "", (), tuple(warnings))
    message = "\n".join([headline(case_id, result, budget), *(f"- {p.text}" for p in problems)])
    return Verdict("failed", message, tuple(problems), tuple(warnings))

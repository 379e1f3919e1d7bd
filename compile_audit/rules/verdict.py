"""The verdict of one case: one function over structured findings, never over message text.

Problems, in the order a failure message lists them:

- ``MISSED_BREAK``: Dynamo recorded a graph break the report lacks (``compile_audit.rules.reconcile``): the probe
  is wrong, so no count of the case can be trusted. Fails whatever the budget; nothing holds it.
- ``RECOMPILE_LIMIT``: Dynamo gave up on a frame and runs it eagerly. Fails whatever the budget, also where the frame
  is a consequence of a budgeted root (the message shows it under that root); only a ``known_failure`` naming the
  frame holds it, and such a run never feeds the ratchet.
- ``OVER_BUDGET``: more graph breaks / recompiles / unexpected recompiles / DDP splits than the budget allows.
- ``NEW_ROOT``: a root (``compile_audit.rules.roots``) of the code under test, named by torch's graph-break id, that the
  budget does not list, even within the counts; on any versions.
- ``NEW_SIGNATURE``: a root named by Dynamo's wording, or an unexpected-recompile signature, that the budget does
  not list, even within the counts.
- ``STEADY_STATE``: a phase compiled after the scenario's first full cycle.
- ``CHECK``: a scenario's own check failed (parity with eager, weights, gradients ...).
- ``TIGHTEN``: the ratchet; the case beat its budget (counts or vanished signatures). A failure when
  the installed versions equal those the budgets file records, else a warning.

On versions other than those the budget was recorded with, ``NEW_SIGNATURE`` is a warning too: upstream rewords
guards and breaks without an id between releases, so such signatures name what the budget's own versions report.
A root's graph-break id is stable, so ``NEW_ROOT`` and the counts bind on every version.

With ``updating`` (``--update-budgets``) the budget's own problems (over, new signature, tighten)
are not failures: the budget is being rewritten from this run.

A known failure holds only the problems its entry names (``known_recompile_limit``: the limit hit on those frames;
``known_check``: those failed checks; an entry may name both); every other problem still fails the case, a new break
or recompile signature included. At the limit the run stops at the end of the phase that hit it
(``compile_audit.rules.case``), so its counts and signatures up to there are comparable with the budget that such a run
recorded. A crash is held by ``known_raises`` in the plugin, which never gets to judge.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from compile_audit.normalize import normalize, without_lines
from compile_audit.probe.recompiles import Recompile
from compile_audit.rules.budgets import KNOWN_FAILURE_KINDS, Budget, Observed, compare, known_value_shown
from compile_audit.rules.causes import Allowance, Cause
from compile_audit.rules.reconcile import missed_breaks
from compile_audit.rules.result import AuditResult
from compile_audit.rules.roots import Root, is_graph_break_id

MAX_LISTED = 15  # recompiles listed in a failure message; the JSON report has all
MAX_ROOTS = 20  # roots described in a failure message


class Kind(enum.Enum):
    MISSED_BREAK = "missed break"
    RECOMPILE_LIMIT = "recompile limit"
    OVER_BUDGET = "over budget"
    NEW_ROOT = "new root"
    NEW_SIGNATURE = "new signature"
    STEADY_STATE = "steady state"
    CHECK = "check"
    TIGHTEN = "tighten"


BUDGET_KINDS = frozenset({Kind.OVER_BUDGET, Kind.NEW_ROOT, Kind.NEW_SIGNATURE, Kind.TIGHTEN})


STEADY_STATE_CHECK = "steady state"  # the known_check that holds a STEADY_STATE problem
DEFAULT_CHECK = "scenario check"  # the name of a scenario's check given without one


@dataclasses.dataclass(frozen=True)
class Problem:
    kind: Kind
    text: str  # one section of the failure message
    # What a known failure names to hold it: the frames at the recompile limit ("wrapped_func at
    # transformers/utils/deprecation.py"), or the failed check's name.
    names: tuple[str, ...] = ()
    # One line that does not move with an edit (no line numbers, phase names or budget-file positions): what the
    # report records, and what a proposed known-failure reason quotes. Empty: the text's first line, without lines.
    summary: str = ""

    @property
    def brief(self) -> str:
        first = self.text.strip().splitlines()[0] if self.text.strip() else ""
        return self.summary or without_lines(first)


def limit_frame(frame: str) -> str:
    """A frame at the limit as a known failure names it: without its line (a resume function's included), which
    moves with every edit."""
    return normalize(frame)


def holds(budget: Budget, problem: Problem) -> bool:
    """Whether the budget's known failure holds this problem (and only then may it be an expected failure)."""
    named = {
        Kind.RECOMPILE_LIMIT: budget.known_recompile_limit,
        Kind.CHECK: budget.known_check,
        Kind.STEADY_STATE: budget.known_check,
    }.get(problem.kind, ())
    return bool(budget.known and named and problem.names) and all(name in named for name in problem.names)


@dataclasses.dataclass(frozen=True)
class Verdict:
    status: str  # "passed" | "failed" | "xfailed"
    message: str  # the failure (or known-failure) text; "" when passed
    problems: tuple[Problem, ...]
    warnings: tuple[str, ...] = ()
    held: tuple[Problem, ...] = ()  # the problems the case's known failure holds

    @property
    def feeds_budget(self) -> bool:
        """Whether ``--update-budgets`` may record this run: not when Dynamo gave up (its counts collapsed), unless
        the known failure names that limit (the run then stops where it always does, and its counts compare)."""
        untrusted = (Kind.RECOMPILE_LIMIT, Kind.MISSED_BREAK)
        return not any(p.kind in untrusted and p not in self.held for p in self.problems)


@dataclasses.dataclass(frozen=True)
class Counted:
    """What the case's own entry budgets: the result less what causes allow in the case (``Budget.allowed``)."""

    roots: tuple[Root, ...]
    recompiles: tuple[Recompile, ...]  # expected ones included
    held_roots: tuple[Root, ...] = ()  # the roots an allowance holds, for the failure to list apart
    held: tuple[tuple[Allowance, int], ...] = ()  # each allowance the case used, with how many it held

    @property
    def unexpected(self) -> tuple[Recompile, ...]:
        return tuple(r for r in self.recompiles if not r.expected)

    @property
    def break_signatures(self) -> dict[str, Root]:
        """Each root's identity with its first root."""
        found: dict[str, Root] = {}
        for root in self.roots:
            found.setdefault(root.identity, root)
        return found

    @property
    def recompile_signatures(self) -> dict[str, Recompile]:
        """Each unexpected recompile's signature with its first occurrence."""
        found: dict[str, Recompile] = {}
        for recompile in self.unexpected:
            found.setdefault(recompile.signature, recompile)
        return found


def counted(result: AuditResult, budget: Budget) -> Counted:
    """Roots and unexpected recompiles whose identity an allowance names, up to its ``at_most``, are the cause's;
    one more than that, and they all count against the entry."""
    all_roots, all_recompiles = result.roots, result.recompiles  # each read attributes anew: read once
    held, held_ids = [], set()
    for allowance in budget.allowed:
        roots = [r for r in all_roots if r.identity == allowance.identity]
        recompiles = [r for r in all_recompiles if not r.expected and r.signature == allowance.identity]
        seen = len(roots) + len(recompiles)
        if 0 < seen <= allowance.at_most:
            held_ids.update(id(found) for found in (*roots, *recompiles))
            held.append((allowance, seen))
    return Counted(
        roots=tuple(r for r in all_roots if id(r) not in held_ids),
        recompiles=tuple(r for r in all_recompiles if id(r) not in held_ids),
        held_roots=tuple(r for r in all_roots if id(r) in held_ids),
        held=tuple(held),
    )


def observed(result: AuditResult, budget: Budget | None = None) -> Observed:
    """What the run shows against the case's entry (less what causes allow there, given the budget)."""
    return _observed(result, counted(result, budget or Budget()))


def _observed(result: AuditResult, seen: Counted) -> Observed:
    return Observed(
        graph_breaks=len(seen.roots),
        recompiles=len(seen.recompiles),
        unexpected_recompiles=len(seen.unexpected),
        break_signatures=tuple(sorted(seen.break_signatures)),
        recompile_signatures=tuple(sorted(seen.recompile_signatures)),
        ddp_splits=result.ddp_split_count,
    )


def _over_budget(result: AuditResult, budget: Budget, over: list[str], where: str) -> Problem:
    section = [f"over budget ({where}): " + "; ".join(over)]
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
    section += [f"budget {why}" for why in budget.explained_by]
    return Problem(Kind.OVER_BUDGET, "\n".join(section), summary="over budget: " + "; ".join(over))


def _new_signatures(result: AuditResult, budget: Budget, seen: Counted, where: str) -> list[Problem]:
    """A root or unexpected recompile the entry does not list. A root of the code under test (in it, or reached from
    it) named by torch's graph-break id fails on any versions: the id does not change with upstream's wording. One
    named by Dynamo's text, one wholly upstream's (torch's FSDP wrapper, say, whose own code changes with torch), and
    a recompile's guard text are judged like the ratchet (``NEW_SIGNATURE``)."""
    if not budget.recorded:  # no entry: the default budget allows no break and no unexpected recompile
        return []
    by_id, worded = [], []
    ceilings = {a.identity: f" (more than cause {a.cause!r} allows per case: {a.at_most})" for a in budget.allowed}
    for signature, root in seen.break_signatures.items():
        if signature not in budget.break_signatures:
            line = f"  new graph break {signature!r} at {root.location}: {root.reason}{ceilings.get(signature, '')}"
            (by_id if is_graph_break_id(root.kind) and root.concerns(result.under_test) else worded).append(line)
    for signature, recompile in seen.recompile_signatures.items():
        if signature not in budget.recompile_signatures:
            ceiling = ceilings.get(signature, "")
            worded.append(f"  new unexpected recompile {signature!r}: {recompile.describe()}{ceiling}")
    head = f"not in the budget ({where}), though the counts may be within it:"
    problems = []
    if by_id:
        problems.append(Problem(Kind.NEW_ROOT, "\n".join([head, *by_id]), summary=_not_in_budget(by_id)))
    if worded:
        problems.append(Problem(Kind.NEW_SIGNATURE, "\n".join([head, *worded]), summary=_not_in_budget(worded)))
    return problems


def _not_in_budget(lines: list[str]) -> str:
    more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
    return f"not in the budget: {without_lines(lines[0].strip())}{more}"


def _tighten(budget: Budget, seen: Counted, under: list[str], where: str) -> Problem | None:
    vanished = []
    if budget.recorded:
        vanished += [f"graph break {s!r} is gone" for s in budget.break_signatures if s not in seen.break_signatures]
        vanished += [
            f"unexpected recompile {s!r} is gone"
            for s in budget.recompile_signatures
            if s not in seen.recompile_signatures
        ]
    if not (under or vanished):
        return None
    return Problem(
        Kind.TIGHTEN,
        f"tighten the budget ({where}): "
        + "; ".join(under + vanished)
        + " -- run `pytest --update-budgets` for this case and commit the file",
        summary="tighten the budget: " + "; ".join(under + vanished),
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
    summary = "steady state broken: a full cycle had run, yet later phases compiled again"
    return Problem(Kind.STEADY_STATE, "\n".join(lines), (STEADY_STATE_CHECK,), summary)


def _missed_breaks(result: AuditResult) -> Problem | None:
    missed = missed_breaks(result.phases)
    if not missed:
        return None
    count = sum(m.count for m in missed)
    lines = [
        f"the probe missed {count} graph break(s) Dynamo recorded; the counts above cannot be trusted (a defect of"
        " compile_audit's probe, not of the code under test):",
        *(f"  {m.describe()}" for m in missed),
    ]
    return Problem(Kind.MISSED_BREAK, "\n".join(lines), summary=f"the probe missed {count} graph break(s)")


def _recompile_limit(result: AuditResult, roots: Sequence[Root]) -> Problem | None:
    own = result.limit_hits
    under_roots = [(hit, root) for root in roots for hit in root.limit_hits]
    hits = [*own, *(hit for hit, _ in under_roots)]
    if not hits:
        return None
    lines = [
        f"Dynamo hit its recompile limit on {len(hits)} frame(s) and runs them eagerly from then on, silently;"
        " no budget allows it, only a known failure naming the frame (known_recompile_limit) holds it:"
    ]
    lines += [f"  {hit.describe()}" for hit in own]
    lines += [
        f"  {hit.describe()} (a consequence of the root at {root.location} in {root.function})"
        for hit, root in under_roots
    ]
    frames = tuple(sorted({limit_frame(hit.frame) for hit in hits}))
    summary = f"Dynamo hit its recompile limit and runs eagerly: {', '.join(frames)}"
    return Problem(Kind.RECOMPILE_LIMIT, "\n".join(lines), frames, summary)


def _check(check: str | tuple[str, str]) -> Problem:
    name, text = (DEFAULT_CHECK, check) if isinstance(check, str) else check
    return Problem(Kind.CHECK, text, (name,))


def _known_failure_named(budget: Budget) -> str:
    named = []
    for field in KNOWN_FAILURE_KINDS:
        value = getattr(budget, field)
        if value:
            shown = known_value_shown(value)
            named.append(f"{field} = {list(shown) if isinstance(shown, tuple) else shown!r}")
    return ", ".join(named) if named else "no known_* field: it holds nothing"


def _judge_known_failure(
    case_id: str,
    result: AuditResult,
    budget: Budget,
    seen: Counted,
    problems: list[Problem],
    where: str,
    warnings: tuple[str, ...],
    versions_note: str = "",
) -> Verdict:
    held = [p for p in problems if holds(budget, p)]
    others = [p for p in problems if p not in held]
    named = _known_failure_named(budget)
    if held and not others:
        first = held[0].text.splitlines()[0]
        return Verdict(
            "xfailed", f"known failure ({budget.known_reason}); today: {first}", tuple(problems), held=tuple(held)
        )
    if not others:
        message = (
            f"{case_id} passes now, but {where} records it as a known failure ({named}: {budget.known_reason}):"
            " remove the known failure from the entry"
        )
        return Verdict("failed", message, (Problem(Kind.CHECK, message),), warnings)
    if held:
        status = f"the known failure ({named}) still holds, and it holds nothing else; these problems are new:"
    else:
        status = f"the known failure it records ({named}) did not occur; these problems did:"
    leading = _leading(case_id, result, budget, seen, versions_note)
    message = "\n".join([*leading, status, *(f"- {p.text}" for p in others)])
    return Verdict("failed", message, tuple(problems), warnings, held=tuple(held))


def headline(
    case_id: str, result: AuditResult, budget: Budget, versions_note: str = "", as_counted: Counted | None = None
) -> str:
    """The failure's first line; ``as_counted``: ``counted(result, budget)``, where the caller has it."""
    as_counted = as_counted or counted(result, budget)
    seen = _observed(result, as_counted)
    expected_allowed = "any" if budget.recompiles is None else budget.recompiles - budget.unexpected_recompiles
    splits = f", ddp splits {seen.ddp_splits}/{budget.ddp_splits}" if seen.ddp_splits or budget.ddp_splits else ""
    consequences = sum(root.consequences for root in (*as_counted.roots, *as_counted.held_roots))
    echoes = f" ({consequences} consequences below their roots)" if consequences else ""
    versions = f"; {versions_note}" if versions_note else ""
    allowed = [f"{n} x {a.identity} (cause {a.cause!r})" for a, n in as_counted.held]
    echoes += f"; allowed by causes beside the entry: {', '.join(allowed)}" if allowed else ""
    return (
        f"{case_id}: graph breaks (roots) {seen.graph_breaks}/{budget.graph_breaks}{splits}, "
        f"unexpected recompiles {seen.unexpected_recompiles}/{budget.unexpected_recompiles}, "
        f"expected {seen.recompiles - seen.unexpected_recompiles}/{expected_allowed}{echoes}{versions}"
    )


def _leading(case_id: str, result: AuditResult, budget: Budget, seen: Counted, versions_note: str) -> list[str]:
    """The first lines of a failure: the headline, then each root with its source line and its consequences."""
    lines = [headline(case_id, result, budget, versions_note, seen)]
    if seen.roots:
        described = [line for root in seen.roots[:MAX_ROOTS] for line in root.describe()]
        hidden = len(seen.roots) - MAX_ROOTS
        described += [f"... {hidden} more roots (all of them in --compile-report)"] if hidden > 0 else []
        lines += ["roots (where Dynamo stopped; fix these):", *(f"  {line}" for line in described)]
    if seen.held_roots:  # after the roots to fix: a cause's allowance already holds these
        lines += ["roots a cause allows in this case (not counted):"]
        lines += [f"  {root.describe()[0]}" for root in seen.held_roots]
    return lines


def by_causes(
    result: AuditResult, budget: Budget, case_id: str = "", checks: Sequence[str | tuple[str, str]] = ()
) -> Budget:
    """A case judged by the causes (``Budget.judged_by``): its entry is what the run met that a cause explains, so
    only a root or unexpected recompile no cause explains fails it (a new method's own break, at its line); a failed
    check or a recompile-limit hit is held where a cause's ``known_failures`` name it for this case."""
    if not budget.judged_by or budget.recorded:
        return budget
    causes = budget.judged_by
    seen = counted(result, budget)  # less what the causes' allowances already hold in the case
    roots = [r.identity for r in seen.roots if any(c.explains(r.identity) for c in causes)]
    recompiles = [r.signature for r in seen.unexpected if any(c.explains(r.signature) for c in causes)]
    names = {c.name for c in causes for s in (*roots, *recompiles) if c.explains(s)}
    check_names = {DEFAULT_CHECK if isinstance(check, str) else check[0] for check in checks}
    if result.steady_state_compiles:
        check_names.add(STEADY_STATE_CHECK)
    held_checks = [n for n in sorted(check_names) if _known_to(causes, f"{case_id}: check {n}", names)]
    frames = sorted({limit_frame(hit.frame) for phase in result.phases for hit in phase.limit_hits})
    held_frames = [f for f in frames if _known_to(causes, f"{case_id}: recompile limit at {f}", names)]
    reasons = ", ".join(sorted(names)) or "(none met)"
    return dataclasses.replace(
        budget,
        graph_breaks=len(roots),
        unexpected_recompiles=len(recompiles),
        break_signatures=tuple(sorted(set(roots))),
        recompile_signatures=tuple(sorted(set(recompiles))),
        note="a method the registry does not know yet, with no entry: it may have what these causes explain: "
        + reasons,
        known_check=tuple(held_checks),
        known_recompile_limit=tuple(held_frames),
        known_failure=f"named by the causes {reasons}" if held_checks or held_frames else "",
        recorded=True,
    )


def _known_to(causes: Sequence[Cause], identity: str, names: set[str]) -> bool:
    found = [c.name for c in causes if c.explains_known_failure(identity)]
    names.update(found)
    return bool(found)


def judge(
    case_id: str,
    result: AuditResult,
    budget: Budget,
    *,
    checks: Sequence[str | tuple[str, str]] = (),
    where: str = "budgets file",
    on_recorded_versions: bool = True,
    versions_note: str = "",
    updating: bool = False,
) -> Verdict:
    """The case's verdict. ``checks``: the scenario's own failed checks, each a text or (check name, text);
    ``where``: the budget entry's
    ``file:line`` (or why the default applies); ``on_recorded_versions``: the installed versions equal those the
    budget was recorded with (else the ratchet and new signatures warn); ``versions_note``: which of them differ,
    for the headline."""
    budget = by_causes(result, budget, case_id, checks)
    seen = counted(result, budget)  # attributing is the costly part: once per verdict
    counts = compare(_observed(result, seen), budget)
    limit = _recompile_limit(result, (*seen.roots, *seen.held_roots))
    candidates = [
        _missed_breaks(result),
        limit,
        _over_budget(result, budget, counts.over, where) if counts.over else None,
        *_new_signatures(result, budget, seen, where),
        _steady_state(result),
        *(_check(check) for check in checks),
        None if limit else _tighten(budget, seen, counts.under, where),
    ]
    problems = [p for p in candidates if p is not None and not (updating and p.kind in BUDGET_KINDS)]
    warnings = []
    if not on_recorded_versions:
        warned = {Kind.TIGHTEN, Kind.NEW_SIGNATURE}
        warnings = [f"{p.text} (recorded on other versions)" for p in problems if p.kind in warned]
        problems = [p for p in problems if p.kind not in warned]
    if budget.known:
        return _judge_known_failure(case_id, result, budget, seen, problems, where, tuple(warnings), versions_note)
    if not problems:
        return Verdict("passed", "", (), tuple(warnings))
    message = "\n".join([*_leading(case_id, result, budget, seen, versions_note), *(f"- {p.text}" for p in problems)])
    return Verdict("failed", message, tuple(problems), tuple(warnings))

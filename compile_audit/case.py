"""One audited case: graph breaks, phases, budget and extra findings, judged into one message."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch._dynamo

from compile_audit.budgets import Budget, Observed, compare
from compile_audit.graph_breaks import GraphBreakReport, find_graph_breaks
from compile_audit.recompiles import PhaseAudit, PhaseRecord
from compile_audit.result import AuditResult

MAX_LISTED = 15  # recompiles listed in a failure message; the JSON report has all


class CaseAudit:
    """Everything one case measured, and the verdict against its budget.

    Checks that are not budgets (parity with eager, weights that must change) are reported
    with :meth:`expect`; :meth:`failures` returns every problem at once, so one run tells the
    whole story.
    """

    def __init__(self, case_id: str, budget: Budget, *, backend: str | Callable[..., Any] = "eager") -> None:
        self.case_id = case_id
        self.budget = budget
        self.backend = backend
        self.result = AuditResult(case_id)
        self.findings: list[str] = []
        self._phases: PhaseAudit | None = None

    def graph_breaks(self, fn: Callable[..., Any], *args: Any, call: str, **kwargs: Any) -> GraphBreakReport:
        """Count the graph breaks of one call (run this before :meth:`compile`: explain resets Dynamo)."""
        if self._phases is not None:
            raise RuntimeError("graph_breaks() after compile(): torch._dynamo.explain would reset the audit")
        report = find_graph_breaks(fn, *args, call=call, **kwargs)
        self.result.explained.append(report)
        return report

    def compile(self, fn: Any, **compile_kwargs: Any) -> Any:
        torch._dynamo.reset()
        self._phases = PhaseAudit(self.backend)
        self.result.phases = self._phases.phases
        return self._phases.compile(fn, **compile_kwargs)

    @contextlib.contextmanager
    def phase(self, name: str, kind: str = "other", expect: tuple[str, ...] = ()) -> Iterator[PhaseRecord]:
        if self._phases is None:
            raise RuntimeError("phase() before compile()")
        with self._phases.phase(name, kind, expect) as record:
            yield record

    def steady_state_after(self, phase_name: str) -> None:
        """From the next phase on, the case must compile nothing."""
        self.result.steady_state_from = phase_name

    def expect(self, problem: str | None) -> None:
        if problem:
            self.findings.append(problem)

    def observed(self) -> Observed:
        return Observed(
            graph_breaks=self.result.graph_break_count,
            recompiles=len(self.result.recompiles),
            unexpected_recompiles=len(self.result.unexpected_recompiles),
        )

    def failures(self, *, budget_file: Path | None = None, strict_ratchet: bool = True) -> tuple[list[str], list[str]]:
        """(failure sections, warnings). Empty failures means the case passed."""
        verdict = compare(self.observed(), self.budget)
        failures: list[str] = []
        warnings: list[str] = []
        where = self._budget_location(budget_file)
        if verdict.over:
            section = [f"over budget ({where}): " + "; ".join(verdict.over)]
            if self.result.graph_break_count > self.budget.graph_breaks:
                section.append("graph breaks:")
                section += [f"  {line}" for line in self.result.describe_breaks()]
            if self.result.recompiles:
                section.append("recompiles:")
                section += [f"  {r.describe()}" for r in self.result.recompiles[:MAX_LISTED]]
                hidden = len(self.result.recompiles) - MAX_LISTED
                if hidden > 0:
                    section.append(f"  ... {hidden} more recompiles (all of them in --compile-report)")
            if self.budget.note:
                section.append(f"budget note: {self.budget.note}")
            failures.append("\n".join(section))
        if verdict.under:
            message = (
                f"tighten the budget ({where}): "
                + "; ".join(verdict.under)
                + " -- run `pytest --update-budgets` for this case and commit the file"
            )
            (failures if strict_ratchet else warnings).append(message)
        steady = self.result.steady_state_compiles
        if steady:
            lines = [
                f"steady state broken: after phase {self.result.steady_state_from!r} a full cycle had run,"
                " yet these phases compiled again:"
            ]
            for phase in steady:
                lines.append(f"  [{phase.name}] {phase.frames_compiled} frame(s) compiled")
                lines += [f"    {r.describe()}" for r in phase.recompiles]
            failures.append("\n".join(lines))
        failures += self.findings
        return failures, warnings

    def _budget_location(self, budget_file: Path | None) -> str:
        if not self.budget.recorded:
            return "no entry in the budgets file: default budget 0 graph breaks, 0 unexpected recompiles"
        shown = os.path.relpath(budget_file) if budget_file else "budgets file"
        return f"{shown}:{self.budget.line}"

    def failure_message(self, failures: list[str]) -> str:
        observed = self.observed()
        budget = self.budget
        head = (
            f"{self.case_id}: graph breaks {observed.graph_breaks}/{budget.graph_breaks}, "
            f"recompiles {observed.recompiles}/{'expected only' if budget.recompiles is None else budget.recompiles}"
            f" ({observed.unexpected_recompiles} unexpected, budget {budget.unexpected_recompiles})"
        )
        return "\n".join([head, *[f"- {section}" for section in failures]])

    def outcome(self, failures: list[str], *, budget_file: Path | None = None) -> tuple[str, str]:
        """("pass" | "fail" | "xfail", message): the verdict, a ``known_failure`` entry included.

        A known failure that fails is expected ("xfail"); one that passes is a failure, so that the
        entry is removed as soon as PEFT fixes the case.
        """
        known = self.budget.known_failure
        if known and failures:
            return "xfail", f"known failure ({known}); today: {failures[0].splitlines()[0]}"
        if known:
            return "fail", (
                f"{self.case_id} passes now, but {self._budget_location(budget_file)} records it as a known "
                f"failure ({known}): remove known_failure from the entry"
            )
        if failures:
            return "fail", self.failure_message(failures)
        return "pass", ""

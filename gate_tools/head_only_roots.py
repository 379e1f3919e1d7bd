"""Head's failures that need no base run: a graph break at a line of PEFT that base's source does not have.

Base runs the cases head failed to tell a regression from a failure both sides share (an environment, a flaky
check). Where base is the release the budgets were recorded on, with the same torch and transformers, a case that
fails its budget on head with a root at a line whose text base's file lacks (the file, or the line anywhere in it)
cannot fail that way on base, when that root is one the budget does not hold: base never executes that line, and
base's own roots are what the budget holds. Such a case is a regression decided on head alone; the others still run
on base.

A line is compared by its text, stripped, in the same file: a line moved or re-indented is not new, a line
whose text base has anywhere in that file is not new, and a root whose source text the report lacks decides
nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from compile_audit.artifacts.diff import code, plain
from compile_audit.artifacts.records import CaseRecord, Root
from compile_audit.rules.budgets import BudgetFile

BUDGET_PROBLEMS = frozenset({"over budget", "new root", "new signature"})
ROOT_CASES_SHOWN = 12
_VERSION = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


@dataclass(frozen=True)
class DecidedOnHead:
    """A failed case and its roots at lines base lacks."""

    case: CaseRecord
    roots: tuple[Root, ...]


def package_version(package: Path) -> str | None:
    """``__version__`` as the package's ``__init__.py`` writes it, or None."""
    try:
        found = _VERSION.search((package / "__init__.py").read_text(encoding="utf-8"))
    except OSError:
        return None
    return found[1] if found else None


class BaseLines:
    """The stripped lines of each file of base's package, read once."""

    def __init__(self, package: Path) -> None:
        self.package = package
        self._files: dict[str, frozenset[str] | None] = {}

    def lacks(self, root: Root) -> bool:
        """Whether the root is at a line of the package whose text base's same file does not have."""
        path, _, line = root.location.rpartition(":")
        text = root.source.strip()
        prefix = f"{self.package.name}/"
        if not (path.startswith(prefix) and line.isdigit() and text) or text.startswith("#"):
            return False
        lines = self._lines(path[len(prefix) :])
        return lines is None or text not in lines

    def _lines(self, relative: str) -> frozenset[str] | None:
        if relative not in self._files:
            try:
                text = (self.package / relative).read_text(encoding="utf-8")
            except FileNotFoundError:
                self._files[relative] = None
            else:
                self._files[relative] = frozenset(line.strip() for line in text.splitlines())
        return self._files[relative]


def fails_its_budget(case: CaseRecord) -> bool:
    return any(problem.kind in BUDGET_PROBLEMS and not problem.held for problem in case.problems)


def outside_budget(root: Root, case_id: str, budgets: BudgetFile) -> bool:
    """Whether no part of the case's budget holds the root (its entry, a cause's allowance in it), the entry having
    been recorded on the file's own versions (an entry recorded elsewhere does not hold base's roots)."""
    budget = budgets.budget_for(case_id)
    if budget.recorded_with:
        return False
    return root.identity not in budget.break_signatures and root.identity not in {a.identity for a in budget.allowed}


def decided_on_head(cases: Iterable[CaseRecord], base_package: Path, budgets: BudgetFile) -> list[DecidedOnHead]:
    """The cases failing their budget with a root outside it at a line base's package lacks, in the order given."""
    base = BaseLines(base_package)
    decided = []
    for case in cases:
        if not fails_its_budget(case):
            continue
        roots = tuple(
            root for root in case.graph_breaks.roots if base.lacks(root) and outside_budget(root, case.id, budgets)
        )
        if roots:
            decided.append(DecidedOnHead(case, roots))
    return decided


def base_is_recorded_release(base_package: Path, recorded: Mapping[str, str]) -> bool:
    version = package_version(base_package)
    return version is not None and version == recorded.get(base_package.name)


def decided_section(decided: list[DecidedOnHead]) -> list[str]:
    """Markdown: each root at a line base lacks, with the cases it fails, then each case in one line."""
    by_location: dict[str, tuple[Root, list[str]]] = {}
    for item in decided:
        for root in item.roots:
            by_location.setdefault(root.location, (root, []))[1].append(item.case.id)
    lines = [
        "",
        f"## Breaks at lines base does not have ({len(by_location)} root(s), {len(decided)} case(s), base not run)",
        "",
    ]
    for location, (root, cases) in by_location.items():
        shown = ", ".join(cases[:ROOT_CASES_SHOWN]) + (", ..." if len(cases) > ROOT_CASES_SHOWN else "")
        reason = plain(root.reason.splitlines()[0]) if root.reason else "?"
        lines.append(
            f"- root {code(location)} in {code(root.function)}: {reason} — {code(root.source)}; in {len(cases)}"
            f" case(s): {shown}"
        )
    lines += ["", f"### Cases decided on head ({len(decided)})", ""]
    for item in decided:
        case = item.case
        where = ", ".join(code(root.location) for root in item.roots)
        lines.append(
            f"- **{case.id}**: {case.status}, graph breaks {case.graph_breaks.count} — **regression**: root at {where},"
            " a line base lacks"
        )
    return lines

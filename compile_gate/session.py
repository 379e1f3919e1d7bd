"""The gate's state for one pytest session: records, outcomes, benchmark figures and budget proposals, all
in memory; :meth:`GateSession.finish` writes the budgets file and the report, each once.

Each case's :class:`~compile_audit.artifacts.records.CaseRecord`, the type every reader of a report uses, is built
by the plugin when the case's audit ends (a field the record does not know is refused there). Under xdist every
item runs on a worker; the record travels as its JSON in the test report's ``user_properties``, and only the
controller finishes the session: it reads each record back, sets its outcome, and writes the report as the
records' JSON.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from compile_audit.artifacts.json_fields import Where
from compile_audit.artifacts.records import CaseRecord, written
from compile_audit.artifacts.report import build_report, write_report
from compile_audit.files import exclusive
from compile_audit.rules.budgets import Budget, BudgetFile
from compile_audit.rules.versions import DEFAULT_GATED, gated

RECORD = "compile_gate_case"  # user_properties keys
BENCHMARKS = "compile_gate_benchmarks"
PROPOSAL = "compile_gate_budget"
PENDING = "pending"  # a record's status until its test report says how the case ended


@dataclasses.dataclass
class GateSession:
    budget_file: BudgetFile
    rootpath: Path
    updating: bool = False
    report_path: Path | None = None
    record_path: Path | None = None  # --record-budgets: the budgets file with this run's entries, written there
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    gated_libraries: tuple[str, ...] = DEFAULT_GATED  # whose versions decide whether a budget is current
    records: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # by node id
    outcomes: dict[str, tuple[str, str | None]] = dataclasses.field(default_factory=dict)  # by node id
    benchmarks: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # by case id
    proposals: dict[str, Budget] = dataclasses.field(default_factory=dict)  # by case id
    lines: list[str] = dataclasses.field(default_factory=list)  # the end-of-run notes
    cases: list[CaseRecord] = dataclasses.field(default_factory=list)  # set by finish()

    # ------------------------------------------------------------------ while running

    def where(self, case_id: str) -> str:
        return self.budget_file.where(case_id, relative_to=self.rootpath)

    def on_recorded_versions(self, tier: str, case_id: str | None = None) -> bool:
        """Whether the installed versions are those the case's budget was recorded with: only there do the ratchet
        and the budget's signatures fail the case; elsewhere they warn."""
        return self.budget_file.versions_match(tier, gated(self.versions, self.gated_libraries), case_id)

    def versions_note(self, tier: str, case_id: str | None = None) -> str:
        """Which installed versions differ from those the case's budget was recorded with ("" when none do)."""
        differ = self.budget_file.version_differences(tier, gated(self.versions, self.gated_libraries), case_id)
        return f"on other versions than the budget's: {', '.join(differ)}" if differ else ""

    def ingest(self, report: pytest.TestReport) -> None:
        """Take what a test report carries: its outcome, and the record, figures or budget proposal it holds."""
        if report.when == "call" or (report.when in ("setup", "teardown") and not report.passed):
            status = report.outcome if report.when == "call" or report.skipped else "error"
            if hasattr(report, "wasxfail"):
                status = "xfailed"
            previous = self.outcomes.get(report.nodeid)
            if previous is None or previous[0] == "passed":
                self.outcomes[report.nodeid] = (status, _message(report))
        for name, value in report.user_properties:
            if name == RECORD:
                self.records[report.nodeid] = value
            elif name == BENCHMARKS:
                entry = self.benchmarks.setdefault(value["fields"]["id"], {"nodeid": report.nodeid, "figures": {}})
                entry["fields"] = value["fields"]
                entry["figures"].update(value["figures"])
            elif name == PROPOSAL:
                case_id, budget = value
                self.proposals[case_id] = Budget.from_dict(budget)

    # ------------------------------------------------------------------ at the end

    def finish(self, known_case_ids: set[str] | None) -> list[CaseRecord]:
        self.cases = self._cases()
        stale = self.budget_file.stale(known_case_ids) if known_case_ids is not None else []
        if self.updating:
            self._update_budgets(stale)
        elif self.record_path is not None:
            self._record_budgets()
        if stale and not self.updating:
            self.lines.append(f"stale budget entries (no such case any more; --update-budgets removes them): {stale}")
        if self.report_path is not None:
            cases = [case.to_dict() for case in self.cases]
            write_report(self.report_path, build_report(cases, self.versions, self.gated_libraries))
            self.lines.append(f"compile report written to {self.report_path}")
        return self.cases

    def _cases(self) -> list[CaseRecord]:
        """Each case's record as the plugin built it (compile_gate.plugin.case_record), with its outcome and its
        benchmark figures."""
        cases: dict[str, CaseRecord] = {}
        for nodeid, data in self.records.items():
            status, message = self.outcomes.get(nodeid, ("error", "no outcome recorded"))
            record = CaseRecord.from_dict(data, Where("the compile gate's records"))
            cases[record.id] = dataclasses.replace(record, status=status, message=message)
        for case_id, entry in self.benchmarks.items():
            if case_id not in cases:  # a benchmark without an audited record of the same case
                status, message = self.outcomes.get(entry["nodeid"], ("error", "no outcome recorded"))
                fields = {**entry["fields"], "audited": False, "status": status, "message": message}
                cases[case_id] = written(fields, Where("the compile gate's records"))
            figures = {**cases[case_id].benchmarks, **entry["figures"]}
            cases[case_id] = dataclasses.replace(cases[case_id], benchmarks=MappingProxyType(figures))
        return list(cases.values())

    def _record_budgets(self) -> None:
        """The judged file with this run's proposals applied, written to ``record_path``; the judged file is left
        alone, and stale entries stay (only --update-budgets removes them)."""
        recorded = BudgetFile.load(self.budget_file.path, missing_ok=True)
        recorded.path = self.record_path
        recorded.apply(self.proposals, self._proposal_tiers(), gated(self.versions, self.gated_libraries))
        recorded.write()
        self.lines.append(f"budgets recorded: {len(self.proposals)} case(s) written -> {self.record_path}")

    def _proposal_tiers(self) -> dict[str, str]:
        tiers = {case.id: case.tier or "cpu" for case in self.cases}
        return {case_id: tiers.get(case_id, "cpu") for case_id in self.proposals}

    def _update_budgets(self, stale: list[str]) -> None:
        """Apply this run's proposals to the file as it is now (re-read under a lock), not as it was when the run
        started: shards of one selection running side by side on one machine each write their own cases."""
        tiers = self._proposal_tiers()
        with exclusive(self.budget_file.path):
            current = BudgetFile.load(self.budget_file.path, missing_ok=True)
            current.apply(self.proposals, tiers, gated(self.versions, self.gated_libraries))
            removed = [case_id for case_id in stale if current.entries.pop(case_id, None) is not None]
            current.write()
        self.budget_file = current
        self.lines.append(
            f"budgets updated: {len(self.proposals)} case(s) written, {len(removed)} stale removed -> {current.path}"
        )
        if removed:
            self.lines.append(f"removed stale entries: {removed}")


def json_safe(figures: dict[str, Any]) -> dict[str, Any]:
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in figures.items()}


def _message(report: pytest.TestReport) -> str | None:
    if report.passed:
        return None
    if hasattr(report, "wasxfail"):
        return str(report.wasxfail)
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    text = report.longreprtext if crash is None or report.when == "call" else crash.message
    # xdist prefixes the worker's platform line; the report wants the failure itself.
    lines = [line for line in text.strip().splitlines() if not line.startswith("[gw")]
    style = getattr(getattr(report.longrepr, "reprtraceback", None), "style", None)
    if crash is not None and report.when == "call" and style != "value":
        # An exception, not the gate's own verdict (pytest.fail without a traceback): its type and message first,
        # so that the first line of the report says why.
        lines = [*crash.message.splitlines(), "", *lines]
    return "\n".join(lines).strip()

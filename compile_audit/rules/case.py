"""One audited case: what it compiled (graph breaks, phases, recompiles), the scenario's own checks,
and its verdict against its budget (``compile_audit.rules.verdict``)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch._dynamo

from compile_audit.probe import builds, footprint
from compile_audit.probe.collector import collected_before
from compile_audit.probe.graph_breaks import GraphBreakReport, find_graph_breaks
from compile_audit.probe.recompiles import PhaseAudit, PhaseRecord
from compile_audit.rules.budgets import Budget
from compile_audit.rules.result import AuditResult
from compile_audit.rules.verdict import DEFAULT_CHECK, Verdict, judge, limit_frame

_BACKEND_NAMES = itertools.count()


def reset_dynamo() -> None:
    """``torch._dynamo.reset()``, keeping the case's footprint recording paused while Dynamo compiles."""
    torch._dynamo.reset()
    footprint.reinstall()


def _first_compile(checks: list[tuple[str, str]]) -> None:
    """What ran so far built the case's model (its footprint's build-only functions); a fingerprint run stops here,
    with the checks that failed before it."""
    footprint.mark_built()
    builds.first_compile(checks)


class KnownFailureConfirmed(Exception):
    """Raised at the end of a phase in which Dynamo hit its recompile limit on the frame the case's known failure
    names: the run stops where it always does, so that its counts and signatures compare with the budget."""


class CaseAudit:
    """Everything one case measured. Checks that are not budgets (parity with eager, weights that must
    change) are reported with :meth:`expect`; :meth:`verdict` judges everything at once, so one run tells
    the whole story."""

    def __init__(
        self,
        case_id: str,
        budget: Budget,
        *,
        backend: str | Callable[..., Any] = "eager",
        under_test: tuple[str, ...] = (),
        dynamic: bool | None = None,
        regional: bool = False,
        on_phase: Callable[[str], None] | None = None,
    ) -> None:
        self.case_id = case_id
        self.on_phase = on_phase  # told each phase's name as it starts (where a process that dies was)
        self.budget = budget
        self.backend = backend
        self.dynamic = dynamic  # torch.compile's dynamic= (the case's compile policy) unless a call names its own
        self.regional = regional  # each repeated block compiled, not the model (the case's compile policy)
        self.result = AuditResult(under_test=under_test)
        self.checks: list[tuple[str, str]] = []  # the scenario's failed checks: (check name, one line or section)
        self._phases: PhaseAudit | None = None

    def graph_breaks(self, fn: Callable[..., Any], *args: Any, call: str, **kwargs: Any) -> GraphBreakReport:
        """Count the graph breaks of one call (run this before :meth:`compile`: explain resets Dynamo)."""
        if self._phases is not None:
            raise RuntimeError("graph_breaks() after compile(): torch._dynamo.explain would reset the audit")
        _first_compile(self.checks)
        report = find_graph_breaks(fn, *args, call=call, **kwargs)
        self.result.explained.append(report)
        return report

    def _start(self) -> PhaseAudit:
        _first_compile(self.checks)
        reset_dynamo()
        self._phases = PhaseAudit(self.backend, self.dynamic, regional=self.regional)
        self.result.phases = self._phases.phases
        return self._phases

    def compile(self, fn: Any, **compile_kwargs: Any) -> Any:
        return self._start().compile(fn, **compile_kwargs)

    def compile_unaudited(self, fn: Any, **compile_kwargs: Any) -> Any:
        """``torch.compile(fn, **compile_kwargs)`` outside the audit (a model users compile and save from, before the
        case audits anything): nothing counted, but the case's first compile all the same. What ran before it built
        the model; a fingerprint run stops here, before Dynamo traces anything."""
        _first_compile(self.checks)
        return torch.compile(fn, **compile_kwargs)

    @property
    def counting_backend(self) -> Any:
        """The backend that counts graphs and breaks (``compile_audit.probe.recompiles.CountingBackend``)."""
        if self._phases is None:
            raise RuntimeError("counting_backend before compile()")
        return self._phases.backend

    def backend_name(self) -> str:
        """For code that calls ``torch.compile`` itself (the transformers Trainer): the audit's counting
        backend registered under a fresh name to pass as ``backend=``."""
        name = f"compile_audit_{next(_BACKEND_NAMES)}"
        torch._dynamo.register_backend(compiler_fn=self._start().backend, name=name)
        return name

    @contextlib.contextmanager
    def phase(self, name: str, kind: str = "other", expect: tuple[str, ...] = ()) -> Iterator[PhaseRecord]:
        if self._phases is None:
            raise RuntimeError("phase() before compile()")
        if self.on_phase is not None:
            self.on_phase(name)
        with collected_before(), self._phases.phase(name, kind, expect) as record:
            yield record
        frames = {limit_frame(hit.frame) for hit in record.limit_hits}
        if frames and frames <= set(self.budget.known_recompile_limit):
            raise KnownFailureConfirmed(f"{self.case_id}: recompile limit hit in {name}")

    def steady_state_after(self, phase_name: str) -> None:
        """From the next phase on, the case must compile nothing."""
        self.result.steady_state_from = phase_name

    def expect(self, problem: str | None, check: str = DEFAULT_CHECK) -> None:
        """Record a failed check (``None`` or ``""``: the check passed). ``check`` names it, for a known failure
        that holds that check and nothing else (``known_check`` in the budgets file)."""
        if problem:
            self.checks.append((check, problem))

    def verdict(
        self,
        *,
        where: str = "budgets file",
        on_recorded_versions: bool = True,
        versions_note: str = "",
        updating: bool = False,
    ) -> Verdict:
        return judge(
            self.case_id,
            self.result,
            self.budget,
            checks=self.checks,
            where=where,
            on_recorded_versions=on_recorded_versions,
            versions_note=versions_note,
            updating=updating,
        )

"""What a compile report holds per case, typed: ``CaseRecord`` and the records it is made of. Field names are the
JSON's, so docs/report-schema.md is the reference for what each means.

``from_dict`` validates what ``pytest --compile-report`` wrote and raises ReportError
(compile_audit.artifacts.json_fields) naming the file, the case and the field that is wrong; ``to_dict`` gives the
JSON back. A field a case does not have reads as its empty value (0, "", None, an empty tuple or mapping): a case
that was never audited has no counts, and a report of an older schema lacks the fields added since
(``compile_audit.artifacts.report`` reads the schemas it accepts through these records).
Parts of a case that nothing reads but people (the probe's per-phase break records, footprints, benchmark figures,
the compile policy) stay JSON, as read-only mappings.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from compile_audit.artifacts.json_fields import (
    Where,
    field_value,
    json_object,
    read_only_mapping,
    read_only_mappings,
    records,
    required_text,
    section,
    texts,
)


def _plain(value: Any) -> Any:
    """A field's value as JSON."""
    if isinstance(value, _Record):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return json.loads(json.dumps(dict(value)))
    return value


class _Record:
    """``to_dict``: every field under its own name, as JSON."""

    def to_dict(self) -> dict[str, Any]:
        return {field.name: _plain(getattr(self, field.name)) for field in dataclasses.fields(self)}


# ----------------------------------------------------------------------------- recompiles


@dataclasses.dataclass(frozen=True)
class GuardFailure(_Record):
    entry: str = ""  # the cache entry whose guard failed, "0/1"
    guard: str = ""
    location: str | None = None  # the user frame that installed the guard

    @classmethod
    def from_dict(cls, data: Any, where: Where) -> GuardFailure:
        data = json_object(data, where)
        return cls(
            entry=field_value(data, "entry", where, str, ""),
            guard=field_value(data, "guard", where, str, ""),
            location=field_value(data, "location", where, str, None, optional=True),
        )


@dataclasses.dataclass(frozen=True)
class RecompileEvent(_Record):
    phase: str = ""
    frame: str = ""  # "forward at peft/peft_model.py:1801"
    compile_id: str = ""
    expected: bool = False
    reason: str = ""
    signature: str = ""  # the identity the budgets record (Recompile.signature)
    failures: tuple[GuardFailure, ...] = ()
    # Listed under a root (recompiles.events); None in a phase's own list, which does not say.
    consequence: bool | None = None

    @classmethod
    def from_dict(cls, data: Any, where: Where) -> RecompileEvent:
        data = json_object(data, where)
        return cls(
            phase=field_value(data, "phase", where, str, ""),
            frame=field_value(data, "frame", where, str, ""),
            compile_id=field_value(data, "compile_id", where, str, ""),
            expected=field_value(data, "expected", where, bool, False),
            reason=field_value(data, "reason", where, str, ""),
            signature=field_value(data, "signature", where, str, ""),
            consequence=field_value(data, "consequence", where, bool, None),
            failures=records(data, "failures", where, GuardFailure),
        )

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        if self.consequence is None:
            del data["consequence"]
        return data


@dataclasses.dataclass(frozen=True)
class LimitHit(_Record):
    """Dynamo gave up on a frame (its recompile limit) and runs it eagerly from that phase on."""

    phase: str = ""
    frame: str = ""
    limit: str = ""  # "recompile_limit (8)"
    last_guard: str = ""

    @classmethod
    def from_dict(cls, data: Any, where: Where) -> LimitHit:
        data = json_object(data, where)
        return cls(**{field.name: field_value(data, field.name, where, str, "") for field in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class Recompiles(_Record):
    count: int = 0  # judged on their own (not listed under a root)
    unexpected: int = 0
    signatures: tuple[str, ...] = ()  # of the unexpected ones
    limit_hits: tuple[LimitHit, ...] = ()
    events: tuple[RecompileEvent, ...] = ()  # every recompile, consequences included
    consequences: int = 0  # listed under a root
    budget: int | None = None  # None: any number of expected ones
    unexpected_budget: int = 0

    @classmethod
    def from_dict(cls, data: Any, where: Where) -> Recompiles:
        data = json_object(data, where)
        return cls(
            count=field_value(data, "count", where, int, 0),
            budget=field_value(data, "budget", where, int, None, optional=True),
            unexpected=field_value(data, "unexpected", where, int, 0),
            unexpected_budget=field_value(data, "unexpected_budget", where, int, 0),
            signatures=texts(data, "signatures", where),
            consequences=field_value(data, "consequences", where, int, 0),
            limit_hits=records(data, "limit_hits", where, LimitHit),
            events=records(data, "events", where, RecompileEvent),
        )


# ----------------------------------------------------------------------------- graph breaks


@dataclasses.dataclass(frozen=True)
class RootConsequences(_Record):
    """What follows from a root, one line each (compile_audit.rules.roots)."""

    eager_frames: tuple[str, ...] = ()
    nested_breaks: tuple[str, ...] = ()
    recompiles: tuple[str, ...] = ()
    limit_hits: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: Any, where: Where) -> RootConsequences:
        data = json_object(data, where)
        return cls(**{field.name: texts(data, field.name, where) for field in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class Root(_Record):
    """Where Dynamo stopped (compile_audit.rules.roots)."""

    identity: str = ""  # "peft/utils/integrations.py in dequantize_module_weight: gb0156"
    location: str = ""  # "peft/utils/integrations.py:90"
    function: str = ""
    reason: str = ""
    source: str = ""
    via: str = ""  # the innermost frame of the code under test, when the break is outside it
    hits: int = 1
    phases: tuple[str, ...] = ()
    consequences: RootConsequences = RootConsequences()

    @classmethod
    def from_dict(cls, data: Any, where: Where) -> Root:
        data = json_object(data, where)
        text_fields = ("identity", "location", "function", "reason", "source", "via")
        return cls(
            **{field: field_value(data, field, where, str, "") for field in text_fields},
            hits=field_value(data, "hits", where, int, 1),
            phases=texts(data, "phases", where),
            consequences=section(data, "consequences", where, RootConsequences),
        )


@dataclasses.dataclass(frozen=True)
class GraphBreaks(_Record):
    count: int = 0  # roots
    signatures: tuple[str, ...] = ()  # the roots' identities
    roots: tuple[Root, ...] = ()
    records: int = 0  # every graph-break record, the frames a root sent back to Python included
    calls: tuple[Mapping[str, Any], ...] = ()  # those records per phase, as the probe wrote them
    budget: int = 0

    @classmethod
    def from_dict(cls, data: Any, where: Where) -> GraphBreaks:
        data = json_object(data, where)
        return cls(
            count=field_value(data, "count", where, int, 0),
            budget=field_value(data, "budget", where, int, 0),
            signatures=texts(data, "signatures", where),
            records=field_value(data, "records", where, int, 0),
            roots=records(data, "roots", where, Root),
            calls=read_only_mappings(data, "calls", where),
        )


@dataclasses.dataclass(frozen=True)
class DdpSplits(_Record):
    """Graphs DDPOptimizer cut at bucket boundaries (not graph breaks)."""

    count: int = 0
    budget: int = 0

    @classmethod
    def from_dict(cls, data: Any, where: Where) -> DdpSplits:
        data = json_object(data, where)
        return cls(count=field_value(data, "count", where, int, 0), budget=field_value(data, "budget", where, int, 0))


# ----------------------------------------------------------------------------- the verdict and the phases


@dataclasses.dataclass(frozen=True)
class Problem(_Record):
    """One problem of the verdict: its kind, what a known failure names to hold it, whether one does."""

    kind: str = ""  # "over budget", "new root", "recompile limit", "check", ...
    names: tuple[str, ...] = ()  # the frames at the limit, or the checks that failed
    held: bool = False
    summary: str = ""  # one line without line numbers, phase names or budget-file positions

    @classmethod
    def from_dict(cls, data: Any, where: Where) -> Problem:
        data = json_object(data, where)
        return cls(
            kind=field_value(data, "kind", where, str, ""),
            names=texts(data, "names", where),
            held=field_value(data, "held", where, bool, False),
            summary=field_value(data, "summary", where, str, ""),
        )


@dataclasses.dataclass(frozen=True)
class AllowanceHeld(_Record):
    """What a cause's shared allowance (``allows`` in the budgets file) held in the case."""

    cause: str = ""
    identity: str = ""
    count: int = 0

    @classmethod
    def from_dict(cls, data: Any, where: Where) -> AllowanceHeld:
        data = json_object(data, where)
        return cls(
            cause=field_value(data, "cause", where, str, ""),
            identity=field_value(data, "identity", where, str, ""),
            count=field_value(data, "count", where, int, 0),
        )


@dataclasses.dataclass(frozen=True)
class Phase(_Record):
    """One phase of the scenario (train, eval, ...) and what Dynamo compiled in it."""

    name: str
    kind: str = ""
    first_transition: bool = False
    frames_compiled: int = 0
    graphs_compiled: int = 0
    operations_captured: int = 0
    guards: int = 0
    compile_seconds: float = 0.0
    seconds: float = 0.0
    dynamo_counted_breaks: int = 0  # Dynamo's own graph-break counter over the phase (the reconciliation's input)
    graph_breaks: int = 0
    recompiles: tuple[RecompileEvent, ...] = ()
    limit_hits: tuple[LimitHit, ...] = ()
    ddp_splits: tuple[Mapping[str, Any], ...] = ()  # written only when there are any

    COUNTS: ClassVar[tuple[str, ...]] = ("frames_compiled", "graphs_compiled", "operations_captured", "guards")

    @classmethod
    def from_dict(cls, data: Any, where: Where) -> Phase:
        data = json_object(data, where)
        return cls(
            name=required_text(data, "name", where),
            kind=field_value(data, "kind", where, str, ""),
            first_transition=field_value(data, "first_transition", where, bool, False),
            **{count: field_value(data, count, where, int, 0) for count in cls.COUNTS},
            compile_seconds=field_value(data, "compile_seconds", where, float, 0.0),
            seconds=field_value(data, "seconds", where, float, 0.0),
            dynamo_counted_breaks=field_value(data, "dynamo_counted_breaks", where, int, 0),
            graph_breaks=field_value(data, "graph_breaks", where, int, 0),
            recompiles=records(data, "recompiles", where, RecompileEvent),
            limit_hits=records(data, "limit_hits", where, LimitHit),
            ddp_splits=read_only_mappings(data, "ddp_splits", where),
        )

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        if not self.ddp_splits:
            del data["ddp_splits"]
        return data


# ----------------------------------------------------------------------------- the case


def _empty() -> Any:
    """A field whose default is an empty read-only mapping."""
    return dataclasses.field(default_factory=lambda: MappingProxyType({}))


ZOO_FIELDS = ("model", "method", "scenario", "device", "backend")  # this suite's case.report_fields()


@dataclasses.dataclass(frozen=True, kw_only=True)
class CaseRecord(_Record):
    """One case of a report. A JSON field this record does not know (another zoo's identity fields) is kept in
    ``extra``."""

    id: str
    tier: str = ""
    model: str | None = None
    method: str | None = None
    scenario: str | None = None
    device: str | None = None
    backend: str | None = None
    # Compiled and measured (a skip, or a crash before compiling, was not); a record that does not say was audited
    # when it has phases. Its counts compare with another run's, a known failure's included: it stops where it
    # always stops, at the end of the phase that hit the recompile limit, so a new break in it is a regression.
    audited: bool = False
    wall_seconds: float | None = None
    graph_breaks: GraphBreaks = GraphBreaks()
    recompiles: Recompiles = Recompiles()
    ddp_splits: DdpSplits = DdpSplits()
    steady_state_compiles: int = 0
    frames_compiled: int = 0
    compile_seconds: float = 0.0
    phases: tuple[Phase, ...] = ()
    allowed_by_causes: tuple[AllowanceHeld, ...] = ()
    footprint: Mapping[str, Any] = _empty()  # file -> the functions of it the case ran
    footprint_lines: Mapping[str, Any] = _empty()  # file -> the lines the case ran
    footprint_build_only: Mapping[str, Any] = _empty()  # file -> the functions it ran only before its first compile
    footprint_elsewhere: bool = False  # it ran code in processes it started (ranks), which its footprint misses
    problems: tuple[Problem, ...] = ()
    raised: str | None = None  # the type of the exception the test body raised
    error: str | None = None  # its message's first line
    headline: str | None = None  # the verdict's first line
    policy: Mapping[str, Any] = _empty()
    benchmarks: Mapping[str, Any] = _empty()
    status: str  # "passed" | "failed" | "skipped" | "xfailed" | "error"
    message: str | None = None  # the failure text, skip reason or known-failure reason
    extra: Mapping[str, Any] = _empty()

    @property
    def clean(self) -> bool:
        """Compiles cleanly: audited, passed, no graph break, no unexpected recompile, Dynamo never gave up."""
        return (
            self.audited
            and self.status == "passed"
            and self.graph_breaks.count == 0
            and self.recompiles.unexpected == 0
            and not self.recompiles.limit_hits
        )

    @classmethod
    def from_dict(cls, data: Any, where: Where) -> CaseRecord:
        data = json_object(data, where)
        case_id = required_text(data, "id", where)
        where = dataclasses.replace(where, case=f"case {case_id!r}")
        phases = records(data, "phases", where, Phase)
        optional_texts = (*ZOO_FIELDS, "message", "headline", "raised", "error")
        return cls(
            id=case_id,
            tier=field_value(data, "tier", where, str, ""),
            status=required_text(data, "status", where),
            **{field: field_value(data, field, where, str, None, optional=True) for field in optional_texts},
            audited=field_value(data, "audited", where, bool, bool(phases)),
            wall_seconds=field_value(data, "wall_seconds", where, float, None, optional=True),
            graph_breaks=section(data, "graph_breaks", where, GraphBreaks),
            recompiles=section(data, "recompiles", where, Recompiles),
            ddp_splits=section(data, "ddp_splits", where, DdpSplits),
            steady_state_compiles=field_value(data, "steady_state_compiles", where, int, 0),
            frames_compiled=field_value(data, "frames_compiled", where, int, 0),
            compile_seconds=field_value(data, "compile_seconds", where, float, 0.0),
            phases=phases,
            allowed_by_causes=records(data, "allowed_by_causes", where, AllowanceHeld),
            footprint_elsewhere=field_value(data, "footprint_elsewhere", where, bool, False),
            **{
                field: read_only_mapping(data, field, where)
                for field in ("footprint", "footprint_lines", "footprint_build_only", "policy")
            },
            problems=records(data, "problems", where, Problem),
            benchmarks=read_only_mapping(data, "benchmarks", where),
            extra=MappingProxyType({key: value for key, value in data.items() if key not in _CASE_FIELDS}),
        )

    def to_dict(self) -> dict[str, Any]:
        """The report's JSON of the case: the identity (a zoo's own fields after this suite's), then the rest."""
        data = super().to_dict()
        extra = data.pop("extra")
        for field in ZOO_FIELDS:
            if data[field] is None:
                del data[field]
        identity = [key for key in ("id", "tier", *ZOO_FIELDS) if key in data]
        return {**{key: data[key] for key in identity}, **extra, **{k: v for k, v in data.items() if k not in identity}}


_CASE_FIELDS = frozenset(field.name for field in dataclasses.fields(CaseRecord)) - {"extra"}


def written(data: Any, where: Where) -> CaseRecord:
    """The record of a case as its writer built it (the plugin's JSON data), refused with ReportError where a field
    would not survive: the report is the record's JSON, so a field the record does not know must be added to it."""
    case = CaseRecord.from_dict(data, where)
    lost = _lost(data, case.to_dict(), "")
    if lost:
        raise where.error(f"{', '.join(lost)}: written, but no field of the record holds it ({__name__})")
    return case


def _lost(data: Any, kept: Any, path: str) -> list[str]:
    if isinstance(data, Mapping) and isinstance(kept, Mapping):
        lost = [f"{path}{key}" for key in data if key not in kept]
        return lost + [name for key in data if key in kept for name in _lost(data[key], kept[key], f"{path}{key}.")]
    if isinstance(data, list | tuple) and isinstance(kept, list | tuple):
        pairs = enumerate(zip(data, kept, strict=False))  # a record keeps every item of a list
        return [name for i, (a, b) in pairs for name in _lost(a, b, f"{path.rstrip('.')}[{i}].")]
    return []

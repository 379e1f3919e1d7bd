"""The typed report records: what the plugin writes reads back whole, an older schema reads with empty defaults, and a
report that cannot be used fails naming the file, the case and the field."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from compile_audit.artifacts import diff, matrix
from compile_audit.artifacts.json_fields import Where
from compile_audit.artifacts.records import CaseRecord, written
from compile_audit.artifacts.report import SCHEMA, ReportError, read_cases
from tests.selftest import fake_reports as fake

pytestmark = pytest.mark.selftest
LOHA = "llama-tiny/loha/train-eval-train"


def _write(tmp_path, cases, schema=SCHEMA, name="report.json"):
    return fake.write(tmp_path / name, {**fake.report(cases), "schema": schema})


def test_a_record_the_plugin_wrote_reads_back_whole(tmp_path):
    written = fake.plugin_case(LOHA)
    (case,) = read_cases(_write(tmp_path, [written])).cases
    assert case.to_dict() == written
    assert CaseRecord.from_dict(case.to_dict(), Where("again")) == case
    unset = [f.name for f in dataclasses.fields(case) if f.name != "extra" and getattr(case, f.name) == _default(f)]
    assert unset == [], "fake_reports.plugin_case leaves these fields at their defaults: the round trip misses them"


def _default(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else None


def test_fields_another_zoo_writes_are_kept():
    written = {**fake.plugin_case(LOHA), "rank": 8}
    case = fake.record(written)
    assert case.extra == {"rank": 8}
    assert case.to_dict() == written


def test_a_schema_2_report_loads_with_empty_defaults(tmp_path):
    """/2 had no allowed_by_causes (its last files carry it as text), nor, early on, headline, error, policy or a
    problem's summary."""
    old = copy.deepcopy(next(case for case in fake.base_cases() if case["id"] == LOHA))
    old["problems"] = [{"kind": "check", "names": ["parity"], "held": False}]
    old["allowed_by_causes"] = ["2 x x.py in f: gb0001 (cause 'checkpointing')"]
    report = read_cases(_write(tmp_path, [old], schema="compile-audit-report/2"))
    (case,) = report.cases
    assert report.schema == "compile-audit-report/2"
    assert case.allowed_by_causes == ()
    assert (case.headline, case.error, case.raised) == (None, None, None)
    assert case.policy == {} and case.footprint == {}
    assert case.problems[0].summary == ""
    assert case.graph_breaks.count == 6 and case.audited


def test_a_schema_3_report_keeps_what_causes_held(tmp_path):
    case = fake.plugin_case(LOHA)
    (read,) = read_cases(_write(tmp_path, [case])).cases
    held = [(a.cause, a.identity, a.count) for a in read.allowed_by_causes]
    assert held == [("checkpointing", "x.py in f: gb0001", 2)]


@pytest.mark.parametrize("schema", ["compile-audit-report/1", "compile-audit-report/4", "something-else/3", None])
def test_an_unknown_schema_fails_naming_the_file_and_the_schema(tmp_path, schema):
    path = _write(tmp_path, fake.base_cases(), schema=schema)
    with pytest.raises(ReportError) as error:
        read_cases(path)
    assert str(path) in str(error.value) and repr(schema) in str(error.value)


def _set(data, field, value):
    """data with the dotted field (list items by index) set to value."""
    *parents, last = field.split(".")
    for part in parents:
        data = data[int(part)] if part.isdigit() else data[part]
    data[int(last) if last.isdigit() else last] = value


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("graph_breaks.count", "3", "graph_breaks.count: expected an integer, got a string"),
        ("graph_breaks.roots.0.hits", True, "graph_breaks.roots[0].hits: expected an integer, got a boolean"),
        ("recompiles.events.1.expected", "no", "recompiles.events[1].expected: expected true or false"),
        ("recompiles.budget", [], "recompiles.budget: expected an integer or null, got a list"),
        ("phases.0", "train-1", "phases[0]: expected an object"),
        ("problems.0.names", "parity", "problems[0].names: expected a list"),
        ("allowed_by_causes.0.count", 2.5, "allowed_by_causes[0].count: expected an integer, got a number"),
        ("audited", 1, "audited: expected true or false"),
        ("message", 7, "message: expected a string or null"),
    ],
)
def test_a_wrong_typed_field_fails_naming_the_file_the_case_and_the_field(tmp_path, field, value, named):
    case = json.loads(json.dumps(fake.plugin_case(LOHA)))  # its phases and recompiles.events no longer share events
    _set(case, field, value)
    path = _write(tmp_path, [fake.case("llama-tiny/lora/train-eval-train"), case])
    with pytest.raises(ReportError) as error:
        read_cases(path)
    assert str(error.value).startswith(f"{path}: case {LOHA!r}: {named}"), str(error.value)


def test_a_phase_without_a_name_fails_naming_it(tmp_path):
    case = fake.case(LOHA)
    del case["phases"][1]["name"]
    with pytest.raises(ReportError, match=r"case 'llama-tiny/loha/train-eval-train': phases\[1\]\.name: missing"):
        read_cases(_write(tmp_path, [case]))


@pytest.mark.parametrize("main", [diff.main, matrix.main], ids=["diff", "matrix"])
def test_the_tools_exit_2_with_that_message(tmp_path, capsys, main):
    good = _write(tmp_path, fake.base_cases(), name="good.json")
    case = fake.case(LOHA)
    case["recompiles"]["unexpected"] = "2"
    bad = _write(tmp_path, [case], name="bad.json")
    assert main([str(good), str(bad)] if main is diff.main else [str(bad)]) == 2
    assert f"{bad}: case {LOHA!r}: recompiles.unexpected: expected an integer" in capsys.readouterr().err


def test_a_record_without_audited_is_audited_when_it_has_phases():
    with_phases = {key: value for key, value in fake.case(LOHA).items() if key != "audited"}
    without = {"id": LOHA, "status": "error"}
    assert fake.record(with_phases).audited is True
    assert fake.record(without).audited is False
    assert fake.record({**with_phases, "audited": False}).audited is False


def test_the_session_writes_records_and_refuses_a_field_no_record_holds():
    """The report is the records' JSON: what the plugin wrote comes back whole, and a field it wrote that no record
    holds (a phase's new count, say) is refused by name rather than dropped."""
    data = fake.plugin_case(LOHA)
    assert written(data, Where("plugin")).to_dict() == data
    data["phases"][1]["new_count"] = 3
    with pytest.raises(ReportError, match=r"phases\[1\]\.new_count: written, but no field of the record holds it"):
        written(data, Where("plugin"))


def test_the_plugin_builds_the_record_where_the_audit_ends_and_refuses_a_field_there():
    """The plugin's record of a case is a CaseRecord from the start, pending its outcome, and the session gives it
    the test report's outcome; a field no record holds fails the case that wrote it, by name."""
    from compile_gate.plugin import case_record
    from compile_gate.session import PENDING, GateSession

    data = {key: value for key, value in fake.plugin_case(LOHA).items() if key not in ("status", "message")}
    record = case_record(data, LOHA)
    assert isinstance(record, CaseRecord) and record.status == PENDING
    session = GateSession(budget_file=None, rootpath=None)
    session.records["node"] = record.to_dict()
    session.outcomes["node"] = ("failed", "over budget")
    (case,) = session._cases()
    assert (case.status, case.message) == ("failed", "over budget")
    assert case.to_dict() == {**record.to_dict(), "status": "failed", "message": "over budget"}
    data["phases"][1]["new_count"] = 3
    with pytest.raises(ReportError, match=rf"record of {LOHA}.*phases\[1\]\.new_count: written, but no field"):
        case_record(data, LOHA)

"""The compile gate as a pytest plugin (entry point ``pytest11``): options, hooks, fixtures.

A zoo provides a ``case`` fixture (an object with ``id``, ``tier``, ``backend`` and, optionally,
``report_fields()``) and, in its conftest, the hooks of :mod:`compile_gate.hookspecs`. A test that uses the
``case_audit`` fixture is judged against its budget when its body returns; one verdict, from
:func:`compile_audit.rules.verdict.judge`.
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from compile_audit.artifacts.json_fields import Where
from compile_audit.artifacts.records import CaseRecord, written
from compile_audit.artifacts.report import summary_table
from compile_audit.probe import global_state
from compile_audit.probe.collector import freeze_survivors
from compile_audit.probe.policy import CompilePolicy
from compile_audit.rules.budgets import BudgetFile, BudgetFileError
from compile_audit.rules.case import CaseAudit, KnownFailureConfirmed, reset_dynamo
from compile_audit.rules.verdict import by_causes, counted, observed
from compile_audit.rules.versions import DEFAULT_GATED
from compile_gate import crashes, fingerprints, footprints, hookspecs, time_limits
from compile_gate.session import BENCHMARKS, PENDING, PROPOSAL, RECORD, GateSession, json_safe

SESSION = pytest.StashKey[GateSession]()
AUDIT = pytest.StashKey[CaseAudit]()
STATE_BEFORE_SETUP = pytest.StashKey[dict]()
PROBLEMS = pytest.StashKey[list]()  # the verdict's problems, structured, for the report
RAISED = pytest.StashKey[str]()  # the type of the exception the test body raised
ERROR = pytest.StashKey[str]()  # its message's first line
HEADLINE = pytest.StashKey[str]()  # the verdict's first line
POLICY = pytest.StashKey[CompilePolicy]()  # the settings the case ran under
NOTES = pytest.StashKey["crashes.WorkerNotes | None"]()  # an xdist worker's note of its case and phase
DEFAULT_BUDGETS = "tests/compile_budgets.toml"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compile gate")
    group.addoption("--budgets", metavar="PATH", help="budgets file (TOML); default: the compile_budgets ini value")
    group.addoption("--update-budgets", action="store_true", help="rewrite the budgets file from this run")
    group.addoption(
        "--record-budgets",
        metavar="PATH",
        help="judge against the budgets file as usual, and write it with this run's entries applied to PATH"
        " (a first run on new hardware: the budgets it would record, beside the verdicts)",
    )
    group.addoption("--compile-report", metavar="PATH", help="write every case's audit as JSON to PATH")
    footprints.add_option(group)
    fingerprints.add_option(group)
    time_limits.add_options(group)
    time_limits.add_ini(parser)
    parser.addini("compile_budgets", "budgets file, relative to the rootdir", default=DEFAULT_BUDGETS)
    parser.addini(
        "compile_footprint_packages",
        "top-level packages of the code under test: what each case's footprint records (compile_audit.probe.footprint),"
        " and the frame a root outside them names (compile_audit.rules.roots)",
        type="linelist",
        default=[],
    )
    parser.addini(
        "compile_gated_libraries",
        "libraries whose versions decide whether a budget is current (the ratchet fails on them, warns elsewhere) and"
        " that a report diff compares",
        type="linelist",
        default=list(DEFAULT_GATED),
    )


@pytest.hookimpl(trylast=True)
def pytest_compile_gate_versions(config: pytest.Config) -> dict[str, str]:
    return {"python": platform.python_version(), "torch": torch.__version__}


def gate_session(config: pytest.Config) -> GateSession:
    return config.stash[SESSION]


def budgets_path(config: pytest.Config) -> Path:
    """The budgets file of this run: ``--budgets``, else the ``compile_budgets`` ini value."""
    given = config.getoption("--budgets")
    if given:
        return Path(given).absolute()
    return config.rootpath / config.getini("compile_budgets")


PATH_OPTIONS = ("--budgets", "--compile-report", "--record-budgets", fingerprints.OPTION)


def _check_rootdir(config: pytest.Config) -> None:
    """pytest picks its rootdir and ini file before any plugin's options are known, so in ``--budgets PATH`` it
    takes an existing PATH for a test path. Outside the project that moves the rootdir, and the project's ini
    (addopts, markers) is silently not read: say so instead of running the wrong selection."""
    args = list(config.invocation_params.args)
    spaced = [name for name in PATH_OPTIONS if name in args[:-1] and Path(args[args.index(name) + 1]).exists()]
    if spaced and config.inipath is None:
        raise pytest.UsageError(
            f"{spaced[0]} PATH made pytest choose the rootdir {config.rootpath} (no ini file there): pytest reads"
            f" paths before it knows this plugin's options. Write {spaced[0]}=PATH, or pass --rootdir."
        )


def pytest_configure(config: pytest.Config) -> None:
    _check_rootdir(config)
    if footprints.only(config):
        if config.getoption("--update-budgets") or config.getoption("--record-budgets"):
            raise pytest.UsageError("--footprints-only judges nothing: it cannot record budgets")
        os.environ["TORCH_COMPILE_DISABLE"] = "1"  # the ranks of distributed cases too
        torch._dynamo.config.disable = True
    fingerprints.configure(config)
    updating = config.getoption("--update-budgets")
    path = budgets_path(config)
    _check_outputs(config, path if updating else None)
    if not path.exists() and not updating:
        raise pytest.UsageError(f"budgets file {path} does not exist (--update-budgets creates it)")
    try:
        budget_file = BudgetFile.load(path, missing_ok=True)
    except BudgetFileError as error:
        raise pytest.UsageError(f"malformed budgets file: {error}") from None
    except OSError as error:
        raise pytest.UsageError(f"budgets file {path}: cannot read it: {error.strerror}") from None
    report = config.getoption("--compile-report")
    record = config.getoption("--record-budgets")
    if record and updating:
        raise pytest.UsageError("--record-budgets PATH and --update-budgets: choose one (the latter rewrites the file)")
    session = GateSession(
        budget_file=budget_file,
        rootpath=config.rootpath,
        updating=updating,
        report_path=Path(report).absolute() if report else None,
        record_path=Path(record).absolute() if record else None,
        versions=config.hook.pytest_compile_gate_versions(config=config),
        gated_libraries=tuple(config.getini("compile_gated_libraries")),
    )
    config.stash[SESSION] = session
    time_limits.configured_limit(config)  # a bad --case-timeout stops the run here
    config.pluginmanager.register(time_limits, "compile_gate_time_limits")
    folder = None if _is_worker(config) else crashes.new_folder()
    config.stash[NOTES] = crashes.notes_for(config, folder)
    if not _is_worker(config):  # under xdist the controller collects, judges nothing, and finishes
        watch = crashes.CrashWatch(folder) if crashes.distributed(config) else None
        config.pluginmanager.register(SessionHooks(session, watch, folder), "compile_gate_session")


def _check_outputs(config: pytest.Config, budgets: Path | None) -> None:
    """Each file the run writes (the report, the recorded budgets, ``budgets`` when --update-budgets rewrites it) is
    checked before the first case: one the run cannot write is a usage error, not a traceback after the last case."""
    outputs = {
        "--compile-report": config.getoption("--compile-report"),
        "--record-budgets": config.getoption("--record-budgets"),
        "--update-budgets": budgets,
    }
    for option, output in outputs.items():
        path = Path(output).absolute() if output else None
        reason = _unwritable(path) if path else None
        if reason:
            raise pytest.UsageError(f"{option}: cannot write {path}: {reason}")


def _unwritable(path: Path) -> str | None:
    """Why ``path`` cannot be written, or None: a file is created and removed in the nearest folder that exists
    (the write makes the missing ones)."""
    if path.is_dir():
        return "it is a folder"
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    missing = f"cannot create the folder {path.parent}: " if folder != path.parent else ""
    if not folder.is_dir():
        return f"{missing}{folder} is a file, not a folder"
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        return f"{missing}{folder} is not writable ({error.strerror})"
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported lives for the whole session: out of the collector's reach, the collection before each
    phase (``compile_audit.probe.collector``) stays cheap."""
    freeze_survivors()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each case's time limit; --footprints-only runs cases alone: a self-test under a disabled Dynamo would fail for
    nothing."""
    if config.pluginmanager.hasplugin("timeout"):
        time_limits.mark_cases(config, [item for item in items if _is_case(item)])
    if not footprints.only(config):
        return
    others = [item for item in items if not _is_case(item)]
    if others:
        config.hook.pytest_deselected(items=others)
        items[:] = [item for item in items if _is_case(item)]


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _is_case(item: pytest.Item) -> bool:
    return "case" in getattr(item, "fixturenames", ())


def _leaked(before: dict[str, Any]) -> list[str]:
    """What changed since ``before``, each put back so that the next case starts from the same state."""
    leaked = global_state.leaks(before, global_state.snapshot())
    if leaked:
        global_state.restore(before)
    return leaked


def _leak_message(case_id: str, leaked: list[str], where: str) -> str:
    lines = "\n".join(f"  {line}" for line in leaked)
    return (
        f"{case_id}: global state leaked {where}: {len(leaked)} setting(s) changed and not restored (the gate has"
        f" restored them; use a context manager or restore them in the scenario):\n{lines}"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    if _is_case(item):
        # What outlives the cases before (Dynamo keeps guard managers alive through finalizers on long-lived objects,
        # e.g. classes) stays out of the collector's reach: each phase's collection scans only what this case made.
        # Dynamo's caches go first, so that what they held is collected rather than frozen.
        reset_dynamo()
        freeze_survivors()
        item.stash[STATE_BEFORE_SETUP] = global_state.snapshot()
        notes = item.config.stash.get(NOTES, None)
        if notes is not None:
            notes.case_started(item.nodeid, report_fields(item.callspec.params["case"]))
            time_limits.skip_after_too_many_hung(item.config, notes.hung_cases())
    if _is_case(item) and not footprints.timed(item) and not fingerprints.enabled(item.config):
        footprints.start(item)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Judge the case's audit when the test body has returned, or when the audit stopped it because a known failure
    hit the recompile limit again (the verdict is settled). A body that raised fails with its traceback, unless the
    case is a known failure whose reason names that exception type (a crash of another kind still fails). A body
    that changed process-wide torch settings (``compile_audit.probe.global_state``) fails, naming each one."""
    audit = item.stash.get(AUDIT, None)
    before = global_state.snapshot() if _is_case(item) else None
    raised = None
    if _is_case(item) and footprints.only(item.config):
        return (yield from footprints.run_only(item))
    if _is_case(item) and fingerprints.enabled(item.config):
        return (yield from fingerprints.run_case(item, item.config.getini("compile_footprint_packages")))
    try:
        result = yield
    except KnownFailureConfirmed:
        result = None
    except Exception as exc:
        item.stash[RAISED] = type(exc).__name__
        # An exception may say itself in one line (``summary``: a failed rank's own error, say).
        item.stash[ERROR] = first_line(str(getattr(exc, "summary", None) or exc))
        if not _known_crash(audit, exc) or _runxfail(item.config):
            raise
        raised, result = exc, None
    finally:
        footprints.stop(item)
        leaked = _leaked(before) if before is not None else []
    if raised is not None and not leaked:
        today = f"{type(raised).__name__}: {raised}".splitlines()[0][:300]
        pytest.xfail(f"known failure ({audit.budget.known_reason}); today: the case raised {today}")
    if audit is not None and raised is None:
        _judge(item, audit, leaked)
    elif leaked:
        pytest.fail(_leak_message(item.funcargs["case"].id, leaked, "in the test body"), pytrace=False)
    return result


def _runxfail(config: pytest.Config) -> bool:
    """--runxfail turns pytest.xfail() into a no-op, so a known failure would pass: it fails as if unmarked."""
    return bool(getattr(config.option, "runxfail", False))


def _known_crash(audit: CaseAudit | None, exc: Exception) -> bool:
    return audit is not None and bool(audit.budget.known_raises) and type(exc).__name__ == audit.budget.known_raises


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """A fixture of the case that changed a process-wide setting and did not restore it: an error naming it."""
    footprints.stop(item)
    result = yield
    before = item.stash.get(STATE_BEFORE_SETUP, None)
    leaked = _leaked(before) if before is not None else []
    if leaked:
        case = getattr(item, "callspec", None) and item.callspec.params.get("case")
        pytest.fail(_leak_message(getattr(case, "id", item.nodeid), leaked, "by its fixtures"), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A case skipped or broken before its audit started (a skip in a fixture, no CUDA) still gets a record:
    the report lists every case, and a run that audited nothing says so."""
    report = yield
    case = getattr(item, "callspec", None) and item.callspec.params.get("case")
    limit = time_limits.ran_past_limit(item) if call.excinfo is not None else None
    if limit is not None and not item.stash.get(RAISED, None):
        audit = item.stash.get(AUDIT, None)
        phases = audit.result.phases if audit is not None else []
        item.stash[RAISED] = "Timeout"
        item.stash[ERROR] = time_limits.hung_message(limit, phases[-1].name if phases else None, call.excinfo)
        notes = item.config.stash.get(NOTES, None)
        if notes is not None and hasattr(case, "id"):
            notes.case_hung(case.id)
    if report.when == "setup" and not report.passed and hasattr(case, "id"):
        fields = {"raised": item.stash.get(RAISED, None), "error": item.stash.get(ERROR, None)}
        record = case_record({**report_fields(case), "audited": False, **fields}, case.id)
        report.user_properties.append((RECORD, record.to_dict()))
    return report


def _judge(item: pytest.Item, audit: CaseAudit, leaked: list[str]) -> None:
    session = gate_session(item.config)
    case = item.funcargs["case"]
    verdict = audit.verdict(
        where=session.where(audit.case_id),
        on_recorded_versions=session.on_recorded_versions(case.tier, audit.case_id),
        versions_note=session.versions_note(case.tier, audit.case_id),
        updating=session.updating,
    )
    item.stash[PROBLEMS] = [
        {"kind": p.kind.value, "names": list(p.names), "held": p in verdict.held, "summary": p.brief}
        for p in verdict.problems
    ]
    item.stash[HEADLINE] = first_line(verdict.message)
    for warning in verdict.warnings:
        item.warn(pytest.PytestWarning(f"{audit.case_id}: {warning}"))
    if (session.updating or session.record_path) and audit.result.audited and verdict.feeds_budget:
        proposal = session.budget_file.proposal(audit.case_id, observed(audit.result, audit.budget))
        item.user_properties.append((PROPOSAL, (audit.case_id, proposal.to_dict())))
    if leaked:  # whatever the verdict, a known failure included
        failed = f"{verdict.message}\n" if verdict.status == "failed" else ""
        pytest.fail(failed + _leak_message(audit.case_id, leaked, "in the test body"), pytrace=False)
    if verdict.status == "xfailed" and _runxfail(item.config):
        problems = "\n".join(f"- {problem.text}" for problem in verdict.problems)
        pytest.fail(f"{audit.case_id}: {verdict.message}\n{problems}", pytrace=False)
    if verdict.status == "xfailed":
        pytest.xfail(verdict.message)
    if verdict.status == "failed":
        pytest.fail(verdict.message, pytrace=False)


def report_fields(case: Any) -> dict[str, Any]:
    """The case's identity in the report: its id and tier, and the fields of ``case.report_fields()`` if it has it."""
    return {"id": case.id, "tier": case.tier, **(case.report_fields() if hasattr(case, "report_fields") else {})}


@pytest.fixture(autouse=True)
def compile_policy(request: pytest.FixtureRequest):
    """The zoo's settings for the case (``pytest_compile_gate_policy``), applied before its other fixtures and
    recorded in its report record."""
    case = request.getfixturevalue("case") if "case" in request.fixturenames else None
    policy = None
    if case is not None:
        audited = "case_audit" in request.fixturenames
        policy = request.config.hook.pytest_compile_gate_policy(case=case, audited=audited, config=request.config)
    if policy is None:
        yield None
        return
    request.node.stash[POLICY] = policy
    with policy.applied():
        yield policy


@pytest.fixture
def case_audit(request: pytest.FixtureRequest, case: Any, compile_policy: CompilePolicy | None):
    """A CaseAudit for the case, compiling as its policy says; judged when the test body returns; its record goes
    into the report."""
    session = gate_session(request.config)
    audit = CaseAudit(
        case.id,
        # A zoo's case may ask to be judged by the budgets file's causes where it has no entry (a new method's).
        session.budget_file.budget_for(case.id, judged_by_causes=getattr(case, "judged_by_causes", False)),
        backend=case.backend,
        under_test=tuple(request.config.getini("compile_footprint_packages")),
        dynamic=compile_policy.dynamic if compile_policy is not None else None,
        regional=compile_policy.regional if compile_policy is not None else False,
        on_phase=notes.phase_started if (notes := request.config.stash.get(NOTES, None)) else None,
    )
    request.node.stash[AUDIT] = audit
    torch.manual_seed(0)
    started = time.perf_counter()
    yield audit
    record = case_record(
        {
            **report_fields(case),
            "audited": audit.result.audited,
            "wall_seconds": round(time.perf_counter() - started, 2),
            **_with_budget(audit),
            **footprints.record_fields(request.node),
            "problems": request.node.stash.get(PROBLEMS, []),
            "raised": request.node.stash.get(RAISED, None),
            "error": request.node.stash.get(ERROR, None),
            "headline": request.node.stash.get(HEADLINE, None),
            "policy": _policy(request.node),
        },
        case.id,
    )
    request.node.user_properties.append((RECORD, record.to_dict()))


def case_record(fields: dict[str, Any], case_id: str) -> CaseRecord:
    """The case's record, built where its facts are: a field no record holds is refused here, naming the case. Its
    outcome is the test report's, which comes after (GateSession sets it); until then it is ``pending``."""
    return written({**fields, "status": PENDING}, Where(f"the compile gate's record of {case_id}"))


def first_line(text: str, width: int = 400) -> str:
    lines = text.strip().splitlines()
    return lines[0][:width] if lines else ""


def _policy(item: pytest.Item) -> dict[str, Any]:
    policy = item.stash.get(POLICY, None)
    return policy.to_dict() if policy is not None else {}


def _with_budget(audit: CaseAudit) -> dict[str, Any]:
    data = audit.result.to_dict()
    budget = by_causes(audit.result, audit.budget)
    # What causes allow in the case beside its entry counts in the budget shown next to the count.
    seen = counted(audit.result, budget)
    held_roots = audit.result.graph_break_count - len(seen.roots)
    held_recompiles = len(audit.result.unexpected_recompiles) - len(seen.unexpected)
    data["graph_breaks"]["budget"] = budget.graph_breaks + held_roots
    recompiles = budget.recompiles
    data["recompiles"]["budget"] = None if recompiles is None else recompiles + held_recompiles
    data["recompiles"]["unexpected_budget"] = budget.unexpected_recompiles + held_recompiles
    data["ddp_splits"]["budget"] = budget.ddp_splits
    data["allowed_by_causes"] = [
        {"cause": allowance.cause, "identity": allowance.identity, "count": n} for allowance, n in seen.held
    ]
    return data


@pytest.fixture
def record_compile_benchmarks(request: pytest.FixtureRequest):
    """``record(case, figures)``: measured figures (never asserted) for the report's record of ``case``, with the
    compile policy they were measured under (a benchmark's may differ from the judged test's of the same case)."""

    def record(case: Any, figures: dict[str, Any]) -> None:
        payload = {"fields": report_fields(case), "figures": {**json_safe(figures), "policy": _policy(request.node)}}
        request.node.user_properties.append((BENCHMARKS, payload))

    return record


class SessionHooks:
    """The hooks of the process that finishes the session (no xdist, or xdist's controller)."""

    def __init__(self, session: GateSession, watch: crashes.CrashWatch | None, folder: Path) -> None:
        self.session = session
        self.watch = watch  # under xdist: the workers' notes, read when one dies
        self.folder = folder  # the notes' folder, removed at the end

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if self.watch is not None:
            self.watch.pytest_configure_node(node)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """A case whose worker died: its record says so, with how the process ended and the phase it was in."""
        fields = self.watch.crash_fields(crashitem, report.node) if self.watch is not None else None
        if fields is not None:
            self.session.records[crashitem] = case_record(fields, fields["id"]).to_dict()
            self.session.outcomes[crashitem] = ("failed", f"{fields['id']}: {fields['error']}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.session.ingest(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        config = session.config
        self.session.finish(config.hook.pytest_compile_gate_case_ids(config=config))
        crashes.remove(self.folder)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.session.cases:
            terminalreporter.section("compile gate: cases")
            for line in summary_table(self.session.cases):
                terminalreporter.write_line(line)
        for line in self.session.lines:
            terminalreporter.write_line(line)

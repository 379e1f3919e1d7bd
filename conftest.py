"""pytest wiring only: options, markers, case parametrization, fixtures, the end-of-run summary."""

from __future__ import annotations

import collections
import os
import re
import time
from pathlib import Path

import pytest
import torch

import bench_models
from compile_audit.budgets import BudgetFile, BudgetFileError, Observed
from compile_audit.case import CaseAudit
from compile_audit.report import build_report, summary_table, write_report
from tests.cases import CPU_BACKENDS, Case, all_case_ids, cases_for, operation_of

# Each tier or scenario family that needs its own options or fixtures brings them as a plugin module.
pytest_plugins = ["tests.plugins.gpu_tier"]

DEFAULT_BUDGETS = Path(__file__).parent / "tests" / "compile_budgets.toml"
_BUDGETS = pytest.StashKey[BudgetFile]()
_CONFIG: list[pytest.Config] = []  # the running config, for report hooks that do not receive it
_SESSION = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compile gate")
    group.addoption("--update-budgets", action="store_true", help="rewrite the budgets file from this run")
    group.addoption("--compile-report", metavar="PATH", help="write every case's audit as JSON to PATH")
    group.addoption("--full-matrix", action="store_true", help="every method on every architecture")
    group.addoption("--budgets", metavar="PATH", default=str(DEFAULT_BUDGETS), help="budgets file (TOML)")
    group.addoption("--cpu-backend", default="eager", help=f"backend of the CPU tier, one of {', '.join(CPU_BACKENDS)}")


def pytest_configure(config: pytest.Config) -> None:
    # Tiny models gain nothing from intra-op threads, and two xdist workers with two OpenMP threads
    # each oversubscribe a 2-core machine (an eager tiny forward went from 10 ms to 590 ms).
    torch.set_num_threads(1)
    backend = config.getoption("--cpu-backend")
    if backend not in CPU_BACKENDS:
        raise pytest.UsageError(f"--cpu-backend: {backend!r} is not one of {', '.join(CPU_BACKENDS)}")
    try:
        config.stash[_BUDGETS] = BudgetFile.load(config.getoption("--budgets"))
    except BudgetFileError as error:
        raise pytest.UsageError(f"malformed budgets file: {error}") from None
    config.stash[_SESSION] = {"records": {}, "outcomes": {}, "lines": []}
    _CONFIG[:] = [config]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("scenario")
    if marker is None or "case" not in metafunc.fixturenames:
        return
    config = metafunc.config
    cases = cases_for(
        marker.args[0],
        full_matrix=config.getoption("--full-matrix"),
        cpu_backend=config.getoption("--cpu-backend"),
    )
    params = [pytest.param(c, id=c.id, marks=[pytest.mark.gpu] if c.tier == "cuda" else []) for c in cases]
    metafunc.parametrize("case", params)


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture
def device(case: Case) -> str:
    """The torch device of the case: CPU, or this xdist worker's own GPU."""
    if case.device == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        pytest.skip("GPU tier: CUDA is not available on this machine")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker.removeprefix("gw") or 0) % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return f"cuda:{index}"


@pytest.fixture
def make_peft_model(case: Case, device: str):
    """Build the PEFT model of the case (seeded); a combination the zoo cannot run is a skip with its reason."""

    operation = operation_of(case.scenario)

    def build(**overrides):
        if operation is None:
            reason = bench_models.skip_reason(case.model, case.method)
        else:
            reason = bench_models.operation_skip_reason(case.model, case.method, operation)
        if reason:
            pytest.skip(reason)
        dtype = torch.bfloat16 if case.tier == "cuda" else None
        return bench_models.build_peft_model(case.model, case.method, device=device, dtype=dtype, **overrides)

    return build


@pytest.fixture
def case_audit(request: pytest.FixtureRequest, case: Case):
    """A CaseAudit for the case: count breaks, compile, run phases; its record goes into the report."""
    budget_file = request.config.stash[_BUDGETS]
    audit = CaseAudit(case.id, budget_file.budget_for(case.id), backend=case.backend)
    audit.checked = False
    started = time.perf_counter()
    torch.manual_seed(0)
    yield audit
    request.node.user_properties.append(("compile_case", _case_record(case, audit, time.perf_counter() - started)))
    if not audit.checked and getattr(request.node, "rep_call_passed", False):
        pytest.fail(f"{case.id}: the test never called check_budget(audit); the audit was not judged")


@pytest.fixture
def check_budget(request: pytest.FixtureRequest, case: Case):
    """Fail the case, with one message naming every problem, when the audit breaks its budget."""
    budget_file = request.config.stash[_BUDGETS]
    updating = request.config.getoption("--update-budgets")

    def check(audit: CaseAudit) -> None:
        audit.checked = True
        failures, warnings = audit.failures(budget_file=budget_file.path, strict_ratchet=_strict_ratchet(request, case))
        for warning in warnings:
            request.node.warn(pytest.PytestWarning(f"{case.id}: {warning}"))
        if updating:  # the budgets are being rewritten from this run: only non-budget problems fail
            failures = audit.findings + [f for f in failures if f.startswith("steady state")]
        verdict, message = audit.outcome(failures, budget_file=budget_file.path)
        if verdict == "xfail":
            pytest.xfail(message)
        if verdict == "fail":
            pytest.fail(message, pytrace=False)

    return check


def _strict_ratchet(request: pytest.FixtureRequest, case: Case) -> bool:
    budget_file = request.config.stash[_BUDGETS]
    return budget_file.versions_match(case.tier, _gated_versions())


def _gated_versions() -> dict[str, str]:
    versions = bench_models.library_versions()
    return {k: versions[k] for k in ("torch", "transformers", "peft")}


def _case_record(case: Case, audit: CaseAudit, seconds: float) -> dict:
    data = audit.result.to_dict()
    data["graph_breaks"]["budget"] = audit.budget.graph_breaks
    data["recompiles"]["budget"] = audit.budget.recompiles
    data["recompiles"]["unexpected_budget"] = audit.budget.unexpected_recompiles
    return {
        "id": case.id,
        "model": case.model,
        "method": case.method,
        "scenario": case.scenario,
        "device": case.device,
        "backend": case.backend,
        "tier": case.tier,
        "audited": bool(audit.result.phases),
        "wall_seconds": round(seconds, 2),
        **data,
        "benchmarks": getattr(audit, "benchmarks", {}),
    }


# ----------------------------------------------------------------------------- session results


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.rep_call_passed = report.passed
    elif report.when == "setup":
        item.rep_call_passed = False


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
    return "\n".join(lines).strip()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    session = _CONFIG[0].stash.get(_SESSION, None) if _CONFIG else None
    if session is None:
        return
    outcomes = session["outcomes"]
    if report.when == "call" or (report.when in ("setup", "teardown") and not report.passed):
        status = report.outcome if report.when == "call" or report.skipped else "error"
        if hasattr(report, "wasxfail"):  # a known failure (budgets file: known_failure)
            status = "xfailed"
        if report.nodeid not in outcomes or outcomes[report.nodeid][0] == "passed":
            outcomes[report.nodeid] = (status, _message(report))
    for name, value in report.user_properties:
        if name == "compile_case":
            session["records"][report.nodeid] = value


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if hasattr(config, "workerinput"):  # an xdist worker: the controller aggregates
        return
    state = config.stash[_SESSION]
    cases = []
    for nodeid, record in state["records"].items():
        status, message = state["outcomes"].get(nodeid, ("error", "no outcome recorded"))
        cases.append({**record, "status": status, "message": message})
    state["cases"] = cases
    lines = state["lines"]
    budget_file = config.stash[_BUDGETS]
    stale = budget_file.stale(all_case_ids())
    if config.getoption("--update-budgets"):
        _update_budgets(budget_file, cases, stale, lines)
    elif stale:
        lines.append(f"stale budget entries (no such case any more; --update-budgets removes them): {stale}")
    report_path = config.getoption("--compile-report")
    if report_path:
        write_report(report_path, build_report(cases, bench_models.library_versions()))
        lines.append(f"compile report written to {report_path}")


def _update_budgets(budget_file: BudgetFile, cases: list[dict], stale: list[str], lines: list[str]) -> None:
    updated = 0
    for case in cases:
        if not case["audited"]:
            continue
        observed = Observed(
            graph_breaks=case["graph_breaks"]["count"],
            recompiles=case["recompiles"]["count"],
            unexpected_recompiles=case["recompiles"]["unexpected"],
        )
        budget_file.record(case["id"], observed, auto_note=_auto_note(case))
        budget_file.versions[case["tier"]] = _gated_versions()
        updated += 1
    for case_id in stale:
        del budget_file.entries[case_id]
    budget_file.write()
    lines.append(f"budgets updated: {updated} case(s) written, {len(stale)} stale removed -> {budget_file.path}")
    if stale:
        lines.append(f"removed stale entries: {stale}")


def _auto_note(case: dict) -> str:
    """Dynamo's reasons, condensed: each distinct break once, the most common unexpected guard failures."""
    parts = []
    for call in case["graph_breaks"]["calls"]:
        for brk in call["breaks"]:
            parts.append(f"{brk['reason'].split(': ')[0]} at {brk['location']} (x{brk['occurrences']})")
    guards = collections.Counter(
        _without_ids(event["failures"][0]["guard"]) if event["failures"] else "(no guard failure recorded)"
        for event in case["recompiles"]["events"]
        if not event["expected"]
    )
    if guards:
        common = "; ".join(f"{guard} (x{n})" for guard, n in guards.most_common(3))
        parts.append(f"{sum(guards.values())} unexpected recompile(s), most common guard failures: {common}")
    return "; ".join(dict.fromkeys(parts))


def _without_ids(guard: str) -> str:
    """Guard text without object ids and addresses, which differ run to run."""
    return re.sub(r"\b\d{6,}\b", "<id>", guard)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_SESSION, None)
    if not state or hasattr(config, "workerinput"):
        return
    cases = state.get("cases", [])
    if cases:
        terminalreporter.section("compile gate: cases")
        for line in summary_table(cases):
            terminalreporter.write_line(line)
    for line in state["lines"]:
        terminalreporter.write_line(line)

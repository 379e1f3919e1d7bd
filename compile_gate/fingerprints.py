"""``--build-fingerprints PATH``: each case runs up to its first compile, and what it built there is written to PATH
(``compile_audit.probe.builds``), nothing judged. The gate runs it on both sides for the cases a change reaches only
through code they ran while building their model: equal fingerprints, the same compile (``gate_tools.gate``).

PATH: ``compile_audit.selection.builds_file``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from compile_audit.files import write_text_atomic
from compile_audit.probe import builds
from compile_audit.selection import builds_file

OPTION = "--build-fingerprints"
INCOMPATIBLE = ("--update-budgets", "--record-budgets", "--footprints-only")


def add_option(group: Any) -> None:
    group.addoption(
        OPTION,
        metavar="PATH",
        help="run every case up to its first compile and write what it built to PATH (JSON); judges nothing",
    )


def configure(config: pytest.Config) -> None:
    path = config.getoption(OPTION)
    if not path:
        return
    used = [name for name in INCOMPATIBLE if config.getoption(name)]
    if used:
        raise pytest.UsageError(f"{OPTION} judges nothing and records no footprint: it cannot go with {used[0]}")
    config.pluginmanager.register(FingerprintRun(Path(path).absolute()), "compile_gate_fingerprints")


def enabled(config: pytest.Config) -> bool:
    return bool(config.getoption(OPTION))


def run_case(item: pytest.Item, packages: list[str]):
    """The body of a case, stopped at its first compile (a ``pytest_runtest_call`` wrapper's part)."""
    run: FingerprintRun = item.config.pluginmanager.get_plugin("compile_gate_fingerprints")
    case_id = item.funcargs["case"].id
    started = time.perf_counter()
    try:
        with builds.recording(packages):
            yield
    except builds.BuildFingerprinted as stop:
        run.found[case_id] = {**run.shared(stop.fingerprint), "seconds": round(time.perf_counter() - started, 2)}
        pytest.skip(f"{OPTION}: build fingerprinted at the first compile, nothing judged")
    except Exception as exc:
        why = f"raised {type(exc).__name__}: {exc}".splitlines()[0][:300]
        run.found[case_id] = {"missing": why}
        pytest.skip(f"{OPTION}: no fingerprint, the case {why}")
    run.found[case_id] = {"missing": "the case ended without compiling"}
    pytest.skip(f"{OPTION}: no fingerprint, the case ended without compiling")


class FingerprintRun:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.found: dict[str, dict[str, Any]] = {}
        self.entries: dict[str, dict[str, Any]] = {}  # the tables' entries, by digest: most cases share them
        self.started = time.perf_counter()  # pytest's start-up and collection count in the run's wall time

    def shared(self, fingerprint: dict[str, Any]) -> dict[str, Any]:
        """The fingerprint with its tables' entries kept once per run, named by their digest."""
        entries = fingerprint.get("package_entries", {})
        key = builds_file.entries_key(entries)
        self.entries.setdefault(key, entries)
        return {**fingerprint, "package_entries": key}

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Only cases build models: the self-tests are deselected."""
        cases = [item for item in items if "case" in getattr(item, "fixturenames", ())]
        if len(cases) < len(items):
            kept = set(cases)
            config.hook.pytest_deselected(items=[item for item in items if item not in kept])
            items[:] = cases

    def pytest_sessionfinish(self) -> None:
        wall = round(time.perf_counter() - self.started, 2)
        write_text_atomic(self.path, builds_file.to_json(self.found, wall_seconds=wall, entries=self.entries))

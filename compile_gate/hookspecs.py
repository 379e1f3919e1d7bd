"""Hooks a zoo implements (in its conftest.py) to tell the gate what it cannot know itself."""

from __future__ import annotations

from typing import Any

import pytest

from compile_audit.probe.policy import CompilePolicy


@pytest.hookspec(firstresult=True)
def pytest_compile_gate_case_ids(config: pytest.Config) -> set[str] | None:
    """Every case id any run of this suite could produce (all tiers, all options). Budget entries outside it
    are reported as stale, and ``--update-budgets`` removes them. ``None``: stale entries are not checked."""


@pytest.hookspec(firstresult=True)
def pytest_compile_gate_versions(config: pytest.Config) -> dict[str, str] | None:
    """Versions of the libraries under test, by name (``torch``, ...): recorded in the report, and compared
    with the budgets file's ``[versions.<tier>]`` to decide whether the ratchet fails or warns."""


@pytest.hookspec(firstresult=True)
def pytest_compile_gate_policy(case: Any, audited: bool, config: pytest.Config) -> CompilePolicy | None:
    """The settings the test of ``case`` runs under (:class:`compile_audit.probe.policy.CompilePolicy`), applied by the
    gate before the case's other fixtures and recorded in its report record; ``audited``: the test is judged (it uses
    ``case_audit``). ``None``: torch's defaults."""

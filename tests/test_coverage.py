"""Coverage, kept: every layer forward of the installed PEFT that a CPU case can run is run by some case
(tests/footprints.json) or listed with its reason in tests/coverage_gaps.toml, and no entry there is stale. The figure
and the table: python -m tests.tools.coverage (docs/coverage.md)."""

from __future__ import annotations

import pytest

from compile_audit.selection import coverage
from tests.tools.coverage import coverage_rows, version_mismatch


@pytest.fixture(scope="module")
def checked():
    rows, gaps, footprints, _ = coverage_rows()
    mismatch = version_mismatch(footprints)
    if mismatch:
        pytest.skip(f"{mismatch}: footprints are per version (record them again, README 'Selection by change')")
    return rows, gaps


def test_every_runnable_layer_forward_is_run_by_a_case_or_listed_with_its_reason(checked):
    rows, gaps = checked
    missing = coverage.unlisted(rows, gaps)
    assert not missing, "\n".join(
        ["layer forwards no case runs, without a reason (tests/coverage_gaps.toml):", *missing]
    )


def test_no_gap_is_stale(checked):
    rows, gaps = checked
    found = coverage.stale(rows, gaps)
    assert not found, "\n".join(["tests/coverage_gaps.toml lists what is run or gone:", *found])

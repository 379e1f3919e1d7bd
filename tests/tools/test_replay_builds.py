"""The replay's builds-compared file: a commit compared again gets only its cases the file lacks, each run's cases
added to what the file holds."""

from __future__ import annotations

import pytest

from compile_audit.selection.history_replay import builds_compared, read_compared
from gate_tools.replay_builds import add, compared_cases

pytestmark = pytest.mark.selftest


@pytest.mark.parametrize("name", ["compared.json", "compared.json.gz"])
def test_a_later_run_adds_its_cases_to_the_commit_s_entry(tmp_path, name):
    path = tmp_path / name
    assert compared_cases(path, "abc") == set()
    add(path, "abc", ["m/a/x"], {"m/a/y": "built differently"}, {"base": 1.0, "head": 2.0})
    add(path, "abc", ["m/b/x"], {}, {"base": 3.0, "head": 4.0})
    add(path, "def", [], {"m/a/x": "no fingerprint (base: raised ImportError: no)"}, {"base": 1.0, "head": 1.0})
    assert compared_cases(path, "abc") == {"m/a/x", "m/a/y", "m/b/x"}
    assert compared_cases(path, "def") == {"m/a/x"}
    assert read_compared(path)["abc"]["seconds"] == {"base": 4.0, "head": 6.0}
    assert builds_compared(path) == {"abc": frozenset({"m/a/x", "m/b/x"}), "def": frozenset()}

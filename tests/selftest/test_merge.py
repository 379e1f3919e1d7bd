"""Merging shard reports: the union of disjoint shards on one set of versions; overlaps and mixed versions fail."""

from __future__ import annotations

import json

import pytest

from compile_audit.artifacts import diff, merge
from tests.selftest import fake_reports as fake

pytestmark = pytest.mark.selftest


def _shards(tmp_path, cases, sizes, **versions):
    paths, start = [], 0
    for index, size in enumerate(sizes):
        path = tmp_path / f"shard-{index + 1}.json"
        paths.append(fake.write(path, fake.report(cases[start : start + size], **versions)))
        start += size
    return paths


def test_merged_shards_equal_one_run(tmp_path, capsys):
    cases = fake.base_cases()
    whole = fake.write(tmp_path / "whole.json", fake.report(cases))
    shards = _shards(tmp_path, cases, [1, len(cases) - 1])
    assert merge.main([*map(str, shards), "--output", str(tmp_path / "merged.json")]) == 0
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert [c["id"] for c in merged["cases"]] == sorted(c["id"] for c in cases)
    capsys.readouterr()
    assert diff.main([str(whole), str(tmp_path / "merged.json")]) == 0
    assert "no changes" in capsys.readouterr().out


def test_overlapping_shards_are_refused_naming_the_case(tmp_path, capsys):
    cases = fake.base_cases()
    shards = _shards(tmp_path, [*cases, cases[0]], [len(cases), 1])
    assert merge.main([*map(str, shards), "--output", str(tmp_path / "merged.json")]) == 2
    assert f"case {cases[0]['id']!r} is in both" in capsys.readouterr().err
    assert not (tmp_path / "merged.json").exists()


def test_shards_on_different_versions_are_refused_naming_the_package(tmp_path, capsys):
    cases = fake.base_cases()
    first = _shards(tmp_path, cases[:1], [1])[0]
    second = fake.write(tmp_path / "other.json", fake.report(cases[1:], peft="0.22.0"))
    assert merge.main([str(first), str(second), "--output", str(tmp_path / "merged.json")]) == 2
    assert "peft: 0.21.2 vs 0.22.0" in capsys.readouterr().err


def test_a_rerun_replaces_its_cases_and_the_rest_stay(tmp_path, capsys):
    cases = fake.base_cases()
    shards = _shards(tmp_path, cases, [1, len(cases) - 1])
    loha = next(c for c in cases if c["id"] == "llama-tiny/loha/train-eval-train")
    xfailed = {**loha, "status": "xfailed", "message": "known failure (graph breaks in LoHa's dropout)"}
    rerun = fake.write(tmp_path / "rerun.json", fake.report([xfailed]))
    out = tmp_path / "merged.json"
    assert merge.main([*map(str, shards), "--rerun", str(rerun), "--output", str(out)]) == 0
    merged = {c["id"]: c for c in json.loads(out.read_text())["cases"]}
    assert merged[loha["id"]]["status"] == "xfailed"
    assert sorted(merged) == sorted(c["id"] for c in cases)
    assert {i: c["status"] for i, c in merged.items() if i != loha["id"]} == {
        c["id"]: c["status"] for c in cases if c["id"] != loha["id"]
    }
    assert "and 1 re-run(s)" in capsys.readouterr().out


def test_a_rerun_of_a_case_no_shard_has_is_refused(tmp_path, capsys):
    cases = fake.base_cases()
    shards = _shards(tmp_path, cases[1:], [len(cases) - 1])
    rerun = fake.write(tmp_path / "rerun.json", fake.report(cases[:1]))
    assert merge.main([*map(str, shards), "--rerun", str(rerun), "--output", str(tmp_path / "merged.json")]) == 2
    assert f"case {cases[0]['id']!r} of the re-run" in capsys.readouterr().err


def test_a_rerun_on_other_versions_is_refused(tmp_path, capsys):
    cases = fake.base_cases()
    shards = _shards(tmp_path, cases, [len(cases)])
    rerun = fake.write(tmp_path / "rerun.json", fake.report(cases[:1], torch="2.14.0"))
    assert merge.main([*map(str, shards), "--rerun", str(rerun), "--output", str(tmp_path / "merged.json")]) == 2
    assert "torch: 2.13.0+cpu vs 2.14.0" in capsys.readouterr().err

"""One budgets entry for several models' cases: read as each case's own entry, written once while they agree."""

from __future__ import annotations

import dataclasses

import pytest

from compile_audit.rules.budgets import BudgetFile, BudgetFileError

pytestmark = pytest.mark.selftest

GROUPED = """[cases."{llama-tiny,opt-tiny}/lora/depth"]
graph_breaks = 1
note = "one break per layer"
break_signatures = ["peft/x.py in f: gb0001"]
"""


def _load(tmp_path, text: str) -> BudgetFile:
    path = tmp_path / "budgets.toml"
    path.write_text(text)
    return BudgetFile.load(path)


def test_an_entry_for_several_models_is_each_case_s_entry(tmp_path):
    budgets = _load(tmp_path, GROUPED)
    llama, opt = (budgets.budget_for(f"{model}/lora/depth") for model in ("llama-tiny", "opt-tiny"))
    assert llama.graph_breaks == opt.graph_breaks == 1 and llama.note == opt.note
    assert budgets.where("opt-tiny/lora/depth").endswith("budgets.toml:1")
    assert not budgets.budget_for("qwen2-tiny/lora/depth").recorded


def test_cases_that_agree_but_for_the_model_are_written_once_and_split_when_one_changes(tmp_path):
    budgets = _load(tmp_path, GROUPED)
    assert budgets.dumps().endswith(GROUPED)  # unchanged: byte for byte
    changed = dataclasses.replace(budgets.entries["opt-tiny/lora/depth"], graph_breaks=2, line=None)
    budgets.entries["opt-tiny/lora/depth"] = changed
    written = budgets.dumps()
    assert '[cases."llama-tiny/lora/depth"]' in written and '[cases."opt-tiny/lora/depth"]' in written
    assert "{llama-tiny,opt-tiny}" not in written
    budgets.entries["opt-tiny/lora/depth"] = dataclasses.replace(changed, graph_breaks=1)
    assert '[cases."{llama-tiny,opt-tiny}/lora/depth"]' in budgets.dumps()


@pytest.mark.parametrize(
    "key, expected",
    [
        ("{llama-tiny}/lora/depth", "two or more distinct names"),
        ("{llama-tiny,llama-tiny}/lora/depth", "two or more distinct names"),
        ("{llama-tiny,}/lora/depth", "two or more distinct names"),
        ("llama-tiny,opt-tiny}/lora/depth", "write several models as"),
        ("llama-tiny/{lora}/depth", "two or more distinct names"),
        ("llama-tiny/lora/{depth,generate}", "write several models as"),
        ("llama-tiny/lora,dora}/depth", "write several models as"),
    ],
)
def test_a_malformed_key_names_the_file_the_line_and_the_entry(tmp_path, key, expected):
    with pytest.raises(BudgetFileError, match=expected) as error:
        _load(tmp_path, f'[cases."{key}"]\ngraph_breaks = 0\n')
    assert "budgets.toml:1: entry" in str(error.value)


def test_a_case_with_two_entries_is_an_error_naming_both_lines(tmp_path):
    text = GROUPED + '[cases."opt-tiny/lora/depth"]\ngraph_breaks = 2\nnote = "x"\n'
    expected = r"budgets.toml:5: .*'opt-tiny/lora/depth' has an entry already \(line 1\)"
    with pytest.raises(BudgetFileError, match=expected):
        _load(tmp_path, text)


BY_METHOD = """[cases."{llama-tiny,opt-tiny}/{dora,lora}/depth"]
graph_breaks = 1
note = "one break per layer"
break_signatures = ["peft/x.py in f: gb0001"]
"""


def test_an_entry_for_several_models_and_methods_is_each_pairs_entry(tmp_path):
    budgets = _load(tmp_path, BY_METHOD)
    cases = [f"{model}/{method}/depth" for model in ("llama-tiny", "opt-tiny") for method in ("dora", "lora")]
    assert sorted(budgets.entries) == sorted(cases)
    assert {budgets.budget_for(case).graph_breaks for case in cases} == {1}
    assert not budgets.budget_for("llama-tiny/ia3/depth").recorded


def test_cases_that_agree_but_for_the_method_are_written_once_and_split_when_one_changes(tmp_path):
    budgets = _load(tmp_path, BY_METHOD)
    assert budgets.dumps().endswith(BY_METHOD)
    changed = dataclasses.replace(budgets.entries["opt-tiny/dora/depth"], graph_breaks=2, line=None)
    budgets.entries["opt-tiny/dora/depth"] = changed
    written = budgets.dumps()
    assert '[cases."{llama-tiny,opt-tiny}/lora/depth"]' in written and '[cases."opt-tiny/dora/depth"]' in written
    assert '[cases."llama-tiny/dora/depth"]' in written and "{dora,lora}" not in written
    again = _load(tmp_path, written)
    assert again.budget_for("opt-tiny/dora/depth").graph_breaks == 2
    assert again.budget_for("llama-tiny/dora/depth").graph_breaks == 1

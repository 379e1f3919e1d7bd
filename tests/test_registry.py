"""Every PEFT method the installed peft exports has a compile case, or an exclusion that says why; every method
the installed peft lacks is a skip that says so."""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import subprocess
import sys
import warnings

import peft
import pytest

from bench_models import EXCLUDED_PEFT_TYPES, METHODS, MODELS, Method, operation_skip_reason, peft_lacks, skip_reason
from bench_models import config_builders as options
from bench_models.methods import TUNER_LIMITS, Architecture, Operation, Task, check_selectors
from bench_models.models import SEQ_CLS
from compile_audit.case_ids import CaseId
from tests.cases import SCENARIOS, cases_for, operation_of

TINY = [key for key, spec in MODELS.items() if spec.cpu_matrix]


def uncovered_peft_types(peft_types, methods, excluded) -> list[str]:
    covered = {method.peft_type for method in methods.values()} | set(excluded)
    return sorted(t.name for t in peft_types if t.name not in covered)


def test_every_peft_type_has_a_case_or_an_exclusion():
    """A PeftType with no registry entry is a derived method (bench_models.derived_methods): it has cases, judged by
    the causes, so a pull request that adds a method is not red for the registry; it is reported as derived."""
    missing = uncovered_peft_types(peft.PeftType, METHODS, EXCLUDED_PEFT_TYPES)
    assert not missing, (
        f"peft {peft.__version__} exports PeftType(s) with no compile case, not even a derived one (no config class"
        f" registered for them in peft.mapping.PEFT_TYPE_TO_CONFIG_MAPPING): {missing}. Add a Method to"
        " bench_models/methods.py or an entry with the reason in EXCLUDED_PEFT_TYPES: docs/extending.md."
    )
    derived = sorted(f"{m.peft_type} (as {name})" for name, m in METHODS.items() if m.derived)
    if derived:
        warnings.warn(
            f"peft {peft.__version__} exports PeftType(s) the registry does not know, compiled as derived methods:"
            f" {', '.join(derived)}. A Method in bench_models/methods.py refines one (docs/extending.md).",
            stacklevel=1,
        )


def test_exclusions_have_reasons_and_are_not_also_covered():
    covered = {method.peft_type for method in METHODS.values()}
    assert all(reason.strip() for reason in EXCLUDED_PEFT_TYPES.values())
    assert not covered & set(EXCLUDED_PEFT_TYPES), "a PeftType is both covered and excluded"


@pytest.mark.selftest
def test_a_new_peft_type_fails_the_coverage_check():
    future = enum.Enum("PeftType", [*(t.name for t in peft.PeftType), "BRAND_NEW"])
    assert uncovered_peft_types(future, METHODS, EXCLUDED_PEFT_TYPES) == ["BRAND_NEW"]


def test_every_method_runs_somewhere():
    available = [name for name in METHODS if not peft_lacks("llama-tiny", name)]
    nowhere = [name for name in available if all(skip_reason(model, name) for model in TINY)]
    assert not nowhere, f"methods that skip on every tiny model (give them a model or exclude them): {nowhere}"


def test_every_method_of_an_exported_peft_type_is_buildable():
    """A misspelt config class or option would otherwise turn a method into a skip on every peft."""
    exported = set(peft.PeftType.__members__)
    lacking = {
        f"{model}/{name}": peft_lacks(model, name)
        for name, method in METHODS.items()
        if method.peft_type in exported
        for model in TINY
        if peft_lacks(model, name)
    }
    assert not lacking, f"peft {peft.__version__} exports their PeftType, yet the registry says: {lacking}"


# ------------------------------------------------------------------------------ limits: cannot_run, lifts, note


def a_method(**limits) -> Method:
    return Method("brand-new", "LORA", "LoraConfig", options.lora, **limits)


@pytest.mark.selftest
def test_a_method_s_own_cannot_run_adds_to_the_default_limits():
    method = a_method(cannot_run={Operation("merge-unmerge"): "no merge"})
    assert not method.supports("merge-unmerge")
    assert not method.supports("mixed-batch") and not method.supports("hotswap")
    assert dict(method.limits) == {**TUNER_LIMITS, Operation("merge-unmerge"): "no merge"}


@pytest.mark.selftest
def test_a_default_limit_goes_only_when_lifted_by_name_with_a_reason():
    own_reason = a_method(cannot_run={Operation("hotswap"): "swaps LoRA only, this is not"})
    assert own_reason.limits[Operation("hotswap")] == "swaps LoRA only, this is not"
    lifted = a_method(lifts={Operation("hotswap"): "PEFT's hotswap_adapter swaps LoRA adapters"})
    assert lifted.supports("hotswap") and not lifted.supports("mixed-batch")
    with pytest.raises(ValueError, match=r"method 'brand-new': lifts Operation\('generate'\), which is not in TUNER"):
        a_method(lifts={Operation("generate"): "not a default"})


@pytest.mark.parametrize(
    ("selector", "named"),
    [
        (Operation("merge"), "unknown operation 'merge'"),
        (Architecture("llama2"), "unknown architecture 'llama2'"),
        (Task("classification"), "unknown task 'classification'"),
        (Operation("hotswap").on(Architecture("gpt3")), "unknown architecture 'gpt3'"),
        (Operation("generat").on(Task(SEQ_CLS)), "unknown operation 'generat'"),
        ("hotswap", "'hotswap', which is not a selector"),
        (Operation("hotswap").on(Operation("generate")), "Operation('generate') where an Architecture or a Task"),
    ],
)
@pytest.mark.selftest
def test_an_unknown_selector_name_is_an_error_naming_it_and_the_method(selector, named):
    with pytest.raises(ValueError, match=rf"^method 'brand-new' cannot_run names {re.escape(named)}"):
        a_method(cannot_run={selector: "a reason"})
    with pytest.raises(ValueError, match=rf"^ZOO_RULES names {re.escape(named)}"):
        check_selectors("ZOO_RULES", {selector: "a reason"})


def _word_runs(text: str, length: int = 4) -> set[tuple[str, ...]]:
    words = re.findall(r"[\w'/-]+", text.lower())
    return {tuple(words[i : i + length]) for i in range(len(words) - length + 1)}


def test_no_note_restates_a_reason():
    """A note is the person's words on the configuration; the reasons are the limits' and the lifts' (four words in
    a row in common is a restatement)."""
    restated = [
        (name, reason)
        for name, method in METHODS.items()
        for reason in [*method.limits.values(), *method.lifts.values()]
        if reason in method.note or _word_runs(reason) & _word_runs(method.note)
    ]
    assert not restated, f"notes that restate a reason (say it once, in cannot_run or lifts): {restated}"


def test_cannot_run_reasons_are_in_the_skip_messages():
    assert skip_reason("bert-tiny", "shadow") == "shadow does not support task seq-cls (supports: causal-lm)"
    assert skip_reason("bert-tiny", "prefix-tuning") == (
        "prefix-tuning on bert: PEFT's prefix tuning needs past_key_values, which BertModel.forward does not take"
    )
    assert operation_skip_reason("llama-tiny", "osf", "merge-unmerge") == (
        "PEFT does not support merge-unmerge for osf: OSF models do not support unmerging"
    )
    assert operation_skip_reason("llama-tiny", "lora-bias", "merge-unmerge") == (
        "merge-unmerge for lora-bias on llama: llama's linear layers have no bias to merge the bias adapter into"
    )
    assert operation_skip_reason("bert-tiny", "lora", "generate") == "generate needs a causal LM, bert-tiny is seq-cls"
    assert operation_skip_reason("llama-tiny", "lora", "hotswap") is None


# ------------------------------------------------------------------------------ a peft that lacks a method


def test_a_missing_config_class_is_a_skip_with_the_reason(monkeypatch):
    monkeypatch.delattr(peft, "VeraConfig")
    expected = f"vera: not in peft {peft.__version__} (no peft.VeraConfig)"
    assert skip_reason("llama-tiny", "vera") == expected
    assert operation_skip_reason("llama-tiny", "vera", "multi-adapter") == expected
    assert skip_reason("llama-tiny", "lora") is None


def test_a_missing_peft_type_is_a_skip_with_the_reason(monkeypatch):
    older = enum.Enum("PeftType", [name for name in peft.PeftType.__members__ if name != "VERA"])
    monkeypatch.setattr(peft, "PeftType", older)
    assert skip_reason("llama-tiny", "vera") == f"vera: not in peft {peft.__version__} (no peft.PeftType.VERA)"


def test_a_missing_config_option_is_a_skip_with_the_reason(monkeypatch):
    @dataclasses.dataclass
    class LoraConfigWithoutLoraBias:  # what LoraConfig was before it had `lora_bias`
        task_type: str | None = None
        r: int = 8
        lora_alpha: int = 8
        lora_dropout: float = 0.0
        target_modules: list[str] | None = None

    monkeypatch.setattr(peft, "LoraConfig", LoraConfigWithoutLoraBias)
    assert skip_reason("llama-tiny", "lora-bias") == (
        f"lora-bias: not in peft {peft.__version__} (LoraConfig has no option lora_bias)"
    )
    assert skip_reason("llama-tiny", "lora") is None


def test_a_missing_operation_api_is_a_skip_with_the_reason(monkeypatch):
    import peft.utils.hotswap

    monkeypatch.delattr(peft.utils.hotswap, "hotswap_adapter")
    assert operation_skip_reason("llama-tiny", "lora", "hotswap") == (
        f"hotswap: not in peft {peft.__version__} (no peft.utils.hotswap.hotswap_adapter)"
    )
    assert operation_skip_reason("llama-tiny", "lora", "merge-unmerge") is None


# Every config class but LoRA's removed: the registry must still import, and say why for every other method.
_STRIPPED_PEFT = """
import json
import peft
for name in [n for n in dir(peft) if n.endswith("Config") and n not in ("PeftConfig", "LoraConfig")]:
    delattr(peft, name)
import bench_models
print(json.dumps({name: bench_models.skip_reason("llama-tiny", name) for name in bench_models.METHODS}))
"""


def test_the_registry_imports_on_a_peft_without_the_config_classes():
    result = subprocess.run([sys.executable, "-c", _STRIPPED_PEFT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"importing bench_models on a stripped peft failed:\n{result.stderr[-3000:]}"
    reasons = json.loads(result.stdout.strip().splitlines()[-1])
    runnable = sorted(name for name, reason in reasons.items() if reason is None)
    # LoRA's methods that run on llama-tiny with the whole peft (lora-parameters needs MoE experts, which it lacks).
    lora_here = [n for n, m in METHODS.items() if m.config_class == "LoraConfig" and not skip_reason("llama-tiny", n)]
    assert runnable == sorted(lora_here)
    wrong = {
        name: r
        for name, r in reasons.items()
        if r
        and name not in lora_here
        and not r.startswith(f"{name}: not in peft ")
        and r != skip_reason("llama-tiny", name)
    }
    assert not wrong, f"skips without the 'not in peft' reason: {wrong}"


def default_peft_types(case_ids, methods) -> set[str]:
    return {methods[CaseId.parse(case_id).method].peft_type for case_id in case_ids}


def runs(case) -> bool:
    """Whether the case runs rather than skips with the registry's reason (a combination the zoo cannot run)."""
    operation = operation_of(case.scenario)
    if operation is None:
        return not skip_reason(case.model, case.method)
    return not operation_skip_reason(case.model, case.method, operation)


def test_the_default_run_has_a_case_for_every_exported_peft_type():
    """The default run (what a pull request is judged on) runs every method the installed peft exports at least once,
    known failures included: a known failure holds only what it names, so a new break in its method still fails. A
    case that skips (Cartridge on bert-tiny, which has no past_key_values) runs nothing, so it does not count."""
    default = {case.id for scenario in SCENARIOS for case in cases_for(scenario) if case.tier == "cpu" and runs(case)}
    missing = sorted(
        t.name
        for t in peft.PeftType
        if t.name not in EXCLUDED_PEFT_TYPES and t.name not in default_peft_types(default, METHODS)
    )
    assert not missing, f"PeftType(s) with no case in the default run: {missing} (tests/cases.py decides the selection)"


@pytest.mark.selftest
def test_a_method_missing_from_the_default_run_fails_the_coverage_check():
    default = {case.id for case in cases_for("train-eval-train") if case.method != "shira"}
    assert "SHIRA" not in default_peft_types(default, METHODS)


@pytest.mark.selftest
def test_a_scenario_missing_from_the_selection_table_is_an_error_naming_it(monkeypatch):
    import tests.cases

    monkeypatch.setitem(tests.cases.SCENARIOS, "brand-new", None)
    with pytest.raises(ValueError, match=r"scenario 'brand-new' has no entry in SELECTION \(tests/cases.py\)"):
        cases_for("brand-new")


def test_a_method_s_companion_adapters_sit_beside_its_active_adapter():
    """Arrow's router reads its task adapters (Method.companions): the model holds them, the router stays active."""
    from bench_models import build_peft_model
    from bench_models.methods import ARROW_TASK_ADAPTERS

    reason = ("lora-arrow" not in METHODS and "no lora-arrow method") or skip_reason("llama-tiny", "lora-arrow")
    if reason:
        pytest.skip(reason)
    model = build_peft_model("llama-tiny", "lora-arrow")
    assert model.active_adapter == "default"
    assert set(ARROW_TASK_ADAPTERS) <= set(model.peft_config), sorted(model.peft_config)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and not any(f".{task}." in name for name in trainable for task in ARROW_TASK_ADAPTERS), trainable

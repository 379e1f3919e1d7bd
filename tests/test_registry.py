"""Every PEFT method the installed peft exports has a compile case, or an exclusion that says why."""

from __future__ import annotations

import peft
import pytest

from bench_models import EXCLUDED_PEFT_TYPES, METHODS, MODELS, skip_reason


def uncovered_peft_types(peft_types, methods, excluded) -> list[str]:
    covered = {method.peft_type for method in methods.values()} | set(excluded)
    return sorted(t.name for t in peft_types if t.name not in covered)


def test_every_peft_type_has_a_case_or_an_exclusion():
    missing = uncovered_peft_types(peft.PeftType, METHODS, EXCLUDED_PEFT_TYPES)
    assert not missing, (
        f"peft {peft.__version__} exports PeftType(s) with no compile case: {missing}. Add a Method to "
        "bench_models/methods.py (sized for the tiny models) or an entry with the reason in EXCLUDED_PEFT_TYPES."
    )


def test_exclusions_have_reasons_and_are_not_also_covered():
    covered = {method.peft_type for method in METHODS.values()}
    assert all(reason.strip() for reason in EXCLUDED_PEFT_TYPES.values())
    assert not covered & set(EXCLUDED_PEFT_TYPES), "a PeftType is both covered and excluded"


@pytest.mark.selftest
def test_a_new_peft_type_fails_the_coverage_check():
    import enum

    future = enum.Enum("PeftType", [*(t.name for t in peft.PeftType), "BRAND_NEW"])
    assert uncovered_peft_types(future, METHODS, EXCLUDED_PEFT_TYPES) == ["BRAND_NEW"]


def test_every_method_runs_somewhere():
    tiny = [key for key, spec in MODELS.items() if not spec.full_size]
    nowhere = [name for name in METHODS if all(skip_reason(model, name) for model in tiny)]
    assert not nowhere, f"methods that skip on every tiny model (give them a model or exclude them): {nowhere}"

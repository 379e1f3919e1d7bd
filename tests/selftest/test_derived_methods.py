"""A PeftType the registry does not know is still compiled: derived from what PEFT declares, judged by the causes."""

from __future__ import annotations

import dataclasses
import enum
import sys
import types

import peft
import pytest
import torch
from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING, PEFT_TYPE_TO_TUNER_MAPPING
from peft.tuners.tuners_utils import BaseTuner, BaseTunerLayer

import bench_models
from bench_models.derived_methods import ALL_LINEAR, derive_method, derived_methods
from bench_models.methods import REGISTERED, Method
from compile_audit.rules.budgets import Budget
from compile_audit.rules.case import CaseAudit
from compile_audit.rules.causes import Cause
from tests.selftest import toys

pytestmark = pytest.mark.selftest

LLAMA = bench_models.get_spec("llama-tiny")


def _copy_of(peft_type: str, name: str = "") -> Method:
    return derive_method(name or f"COPY_{peft_type}", PEFT_TYPE_TO_CONFIG_MAPPING[peft_type], _tuner(peft_type))


def _tuner(peft_type: str):
    return PEFT_TYPE_TO_TUNER_MAPPING.get(peft_type)


def test_a_copy_of_lora_is_derived_with_its_operations_read_from_its_layers():
    method = _copy_of("LORA")
    assert (method.name, method.config_class, method.derived) == ("copy-lora", "LoraConfig", True)
    assert method.supports("merge-unmerge") and method.supports("mixed-batch")  # LoRA's layers have both
    assert not method.supports("hotswap")  # PEFT's hotswap knows LoRA's own PeftType only
    assert method.options(LLAMA)["target_modules"] == ["q_proj", "v_proj"]  # PEFT's mapping for llama


def test_a_tuner_without_a_mapping_targets_every_linear_layer():
    class NoMapping(BaseTuner):
        target_module_mapping = None

    method = derive_method("NO_MAPPING", peft.LoraConfig, NoMapping)
    assert method.options(LLAMA)["target_modules"] == ALL_LINEAR


def test_layers_that_do_not_merge_rule_out_merge_unmerge_with_the_reason(monkeypatch):
    package = "fake_tuner_without_merge"
    layer, model = types.ModuleType(f"{package}.layer"), types.ModuleType(f"{package}.model")
    layer.Layer = type("Layer", (BaseTunerLayer,), {"__module__": layer.__name__})
    model.Model = type("Model", (BaseTuner,), {"__module__": model.__name__, "target_module_mapping": {}})
    monkeypatch.setitem(sys.modules, layer.__name__, layer)
    monkeypatch.setitem(sys.modules, model.__name__, model)
    method = derive_method("NO_MERGE", peft.LoraConfig, model.Model)
    assert not method.supports("merge-unmerge") and not method.supports("mixed-batch")
    assert "do not override BaseTunerLayer.merge" in str(dict(method.limits))


def test_a_prompt_learning_method_adds_virtual_tokens_and_merges_nothing():
    method = _copy_of("PROMPT_TUNING")
    assert not method.supports("merge-unmerge")
    assert set(method.options(LLAMA)) == {"task_type", "num_virtual_tokens"}


def test_a_new_peft_type_gets_a_derived_method_and_a_registry_entry_refines_it(monkeypatch):
    peft_type = enum.Enum("PeftType", {name: name for name in [*peft.PeftType.__members__, "COPY_VERA"]}, type=str)
    monkeypatch.setattr(peft, "PeftType", peft_type)
    monkeypatch.setitem(PEFT_TYPE_TO_CONFIG_MAPPING, "COPY_VERA", peft.VeraConfig)
    monkeypatch.setitem(PEFT_TYPE_TO_TUNER_MAPPING, "COPY_VERA", PEFT_TYPE_TO_TUNER_MAPPING["VERA"])
    derived = derived_methods(REGISTERED, ())
    assert list(derived) == ["copy-vera"] and derived["copy-vera"].derived
    written = dict(REGISTERED)
    written["copy-vera"] = Method("copy-vera", "COPY_VERA", "VeraConfig", REGISTERED["vera"].options)
    assert derived_methods(written, ()) == {}


def test_a_config_the_defaults_cannot_build_raises_naming_what_is_missing(monkeypatch):
    @dataclasses.dataclass
    class NeedsShape(peft.LoraConfig):
        shape: int = dataclasses.field(kw_only=True)

    monkeypatch.setattr(peft, "NeedsShape", NeedsShape, raising=False)
    method = derive_method("NEEDS_SHAPE", NeedsShape, _tuner("LORA"))
    with pytest.raises(TypeError, match="shape"):
        method.make_config(LLAMA)


def test_a_derived_method_builds_and_trains_on_a_tiny_model():
    method = _copy_of("IA3", name="IA3")  # IA3's own classes, under its own PeftType
    model = peft.get_peft_model(bench_models.build_base_model("llama-tiny"), method.make_config(LLAMA))
    batch = bench_models.make_batch("llama-tiny", "ia3", seq_len=8)
    model(**batch).loss.backward()
    assert any(p.grad is not None for p in model.parameters() if p.requires_grad)


# ------------------------------------------------------------------------------ judged by the causes


def _judged(toy: torch.nn.Module, causes: tuple[Cause, ...]):
    audit = CaseAudit("toy/new-method/train", Budget(judged_by=causes), under_test=("tests",))
    compiled = audit.compile(toy)
    with audit.phase("train-1", "train"):
        compiled(torch.randn(2, 4))
    return audit.verdict()


PRINTS = Cause("prints", "the toy prints", ("tests/selftest/toys.py in forward: gb0059",))


def test_a_derived_case_may_have_what_a_cause_explains():
    verdict = _judged(toys.Prints(), (PRINTS,))
    assert verdict.status == "passed", verdict.message


def test_a_derived_case_fails_on_a_break_no_cause_explains_naming_its_line():
    verdict = _judged(toys.BranchesOnData(), (PRINTS,))
    assert verdict.status == "failed"
    assert "graph breaks (roots) 1/0" in verdict.message
    assert toys.planted_line("branch") in verdict.message
    assert "a method the registry does not know yet" in verdict.message


# ------------------------------------------------------------------------------ LoRA's variants


@pytest.fixture
def toy_variant(monkeypatch):
    """A pull request adding a LoRA variant as PEFT's recent ones came: a LoraConfig field with is_lora_variant (a
    config class's defaults) and an entry in Linear.lora_variants (a variant class copied from KaSA's)."""
    from peft.tuners.lora import layer, variants

    @dataclasses.dataclass
    class ToyLoraConfig(peft.LoraConfig):
        toy_config: peft.KasaConfig | None = dataclasses.field(default=None, metadata={"is_lora_variant": True})

    toy_class = type("ToyLinearVariant", (variants.KasaLinearVariant,), {})
    declared = layer.Linear.lora_variants.fget(None)
    monkeypatch.setattr(peft, "LoraConfig", ToyLoraConfig)
    monkeypatch.setattr(layer.Linear, "lora_variants", property(lambda self: {**declared, ("toy_config",): toy_class}))
    return toy_class


def test_a_new_lora_variant_gets_a_derived_method_read_from_its_variant_class(toy_variant):
    from bench_models.lora_variants import lora_variant_methods
    from bench_models.methods import EXCLUDED_LORA_VARIANTS, LORA_VARIANTS

    method = lora_variant_methods(REGISTERED, LORA_VARIANTS, EXCLUDED_LORA_VARIANTS)["lora-toy"]
    assert method.derived and method.peft_type == "LORA"
    assert method.supports("merge-unmerge") and method.supports("mixed-batch")  # KaSA's merges, Linear mixes
    config = method.make_config(LLAMA)
    assert isinstance(config.toy_config, peft.KasaConfig) and config.target_modules == {"q_proj", "v_proj"}


def test_a_variant_the_registry_knows_is_not_derived_and_one_a_registry_entry_sets_gets_no_method(toy_variant):
    from bench_models.lora_variants import lora_variant_methods
    from bench_models.methods import KnownVariant

    methods = lora_variant_methods(REGISTERED, {"toy_config": KnownVariant(note="toy")}, ("arrow_config",))
    assert not methods["lora-toy"].derived and methods["lora-toy"].note.startswith("toy")
    assert "lora-dora" not in methods and "lora-arrow" not in methods  # lora-dora sets use_dora; arrow excluded


def test_a_variant_runs_only_where_the_architecture_s_targets_have_a_class_for_it(toy_variant):
    from bench_models.lora_variants import lora_variant_methods
    from bench_models.methods import EXCLUDED_LORA_VARIANTS, LORA_VARIANTS, Architecture

    method = lora_variant_methods(REGISTERED, LORA_VARIANTS, EXCLUDED_LORA_VARIANTS)["lora-toy"]
    assert Architecture("llama") not in method.limits
    assert "this architecture's LoRA targets are Conv2d" in method.limits[Architecture("convnext")]
    assert "PEFT declares toy_config for Linear only" in method.limits[Architecture("mha_classifier")]


def test_a_variant_whose_merge_only_raises_cannot_merge_naming_the_function():
    from peft.tuners.lora import variants

    from bench_models.lora_variants import merge_limit

    assert merge_limit(variants.ALoraLinearVariant) == "ALoraLinearVariant.merge_safe raises NotImplementedError"
    assert merge_limit(variants.KasaLinearVariant) is None

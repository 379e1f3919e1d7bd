"""The quantized bases: without their library they skip with the reason; methods PEFT has no layer for skip too."""

from __future__ import annotations

import importlib.util

from bench_models import quantized, skip_reason
from tests.cases import FULL_MATRIX_ONLY, QUANTIZED_DEFAULT_METHODS, cases_for


def test_without_bitsandbytes_the_bnb_cases_skip_with_the_reason(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        quantized.importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a)
    )
    reason = skip_reason("llama-tiny-bnb4", "lora")
    assert reason == "bitsandbytes 4-bit NF4 (QLoRA) needs bitsandbytes, not installed (pip install -e '.[quant]')"
    assert skip_reason("llama-tiny", "lora") is None


def test_without_torchao_the_int8_cases_skip_with_the_reason(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        quantized.importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name, *a)
    )
    assert skip_reason("llama-tiny-int8", "lora-dora") == (
        "torchao int8 weight-only needs torchao, not installed (pip install -e '.[quant]')"
    )


def test_a_method_peft_cannot_put_on_quantized_layers_skips_with_the_reason():
    assert skip_reason("llama-tiny-bnb4", "loha") == (
        "loha on bitsandbytes 4-bit NF4 (QLoRA): PEFT has no layer for it (no peft.tuners.loha.bnb)"
    )
    assert skip_reason("llama-tiny-int8", "ia3") == (
        "ia3 on torchao int8 weight-only: PEFT wraps only LoRA around torchao weights"
    )


def test_quantized_models_run_lora_and_dora_by_default_and_bnb_on_the_gpu_tier():
    cases = [c for c in cases_for("train-eval-train") if "bnb" in c.model or "int8" in c.model]
    cpu = sorted(c.id for c in cases if c.tier == "cpu")
    quantized = ("llama-tiny-bnb4", "llama-tiny-int8")  # FP4 compiles as NF4 does: with --full-matrix
    expected = [
        f"{m}/{method}/train-eval-train"
        for m in quantized
        for method in QUANTIZED_DEFAULT_METHODS
        if method not in FULL_MATRIX_ONLY.get((m, "train-eval-train"), ())  # NF4 DoRA: a known failure
    ]
    assert cpu == sorted(expected)
    assert "llama-tiny-bnb4/lora/train-eval-train" in cpu
    full = {c.id for c in cases_for("train-eval-train", full_matrix=True)}
    assert {"llama-tiny-bnb4-fp4/lora/train-eval-train", "llama-tiny-bnb4/lora-dora/train-eval-train"} <= full
    assert {c.id for c in cases if c.tier == "cuda"} >= {"llama-tiny-bnb4/lora/train-eval-train@cuda-inductor"}
    assert not [c for c in cases_for("save-load", full_matrix=True) if "bnb" in c.model]

"""Quantized bases: the tiny models with their linear layers in bitsandbytes 4-bit (QLoRA) or torchao int8.

Built from the random-init model, nothing downloaded: bitsandbytes quantizes on load, so the model is saved to a
temporary folder and loaded back with a `BitsAndBytesConfig`, the way QLoRA users load a checkpoint; torchao
quantizes in place. Without the package a quantized model is a skip with the reason. Never imports pytest.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import tempfile
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Quantization:
    name: str  # "bnb-nf4", "bnb-fp4", "int8"
    package: str  # the import name of the library doing it
    # The PEFT sub-module a tuner needs for these layers ("bnb": peft/tuners/<tuner>/bnb.py), or None when PEFT
    # wraps only LoRA around them (torchao: peft/tuners/lora/torchao.py).
    tuner_module: str | None
    describe: str
    # Why PEFT's merge_adapter cannot round-trip on these layers (the registry claims no merge-unmerge there).
    merge_reason: str
    # Methods PEFT refuses on these layers though their tuner has a layer for them: method name -> why.
    refused: dict[str, str] = dataclasses.field(default_factory=dict)


_BNB_MERGE = (
    "merging dequantizes, adds the delta and re-quantizes to 4 bits, so the merged output differs by the rounding "
    "(LoRA, DoRA); PEFT's IA3 bnb layer raises NotImplementedError"
)
_TORCHAO_MERGE = (
    "PEFT re-quantizes after a merge with the `get_apply_tensor_subclass` of transformers' TorchAoConfig; a model "
    "quantized in place with quantize_ has none and merge raises ValueError"
)

QUANTIZATIONS = {
    q.name: q
    for q in (
        Quantization("bnb-nf4", "bitsandbytes", "bnb", "bitsandbytes 4-bit NF4 (QLoRA)", _BNB_MERGE),
        Quantization("bnb-fp4", "bitsandbytes", "bnb", "bitsandbytes 4-bit FP4", _BNB_MERGE),
        Quantization(
            "int8",
            "torchao",
            None,
            "torchao int8 weight-only",
            _TORCHAO_MERGE,
            refused={"lora-bias": "PEFT's TorchaoLoraLinear raises `ValueError: ... does not support lora_bias yet`"},
        ),
    )
}
QUANT_EXTRA = "pip install -e '.[quant]'"


def get_quantization(name: str) -> Quantization:
    try:
        return QUANTIZATIONS[name]
    except KeyError:
        raise ValueError(f"unknown quantization {name!r}; valid: {', '.join(QUANTIZATIONS)}") from None


def quantization_skip_reason(name: str) -> str | None:
    """Why a model quantized this way cannot be built here (its library is not installed), or None."""
    quantization = get_quantization(name)
    if importlib.util.find_spec(quantization.package) is None:
        return f"{quantization.describe} needs {quantization.package}, not installed ({QUANT_EXTRA})"
    return None


def method_on_quantized_skip_reason(name: str, method_name: str, peft_type: str) -> str | None:
    """Why PEFT cannot put this method on such layers, or None. PEFT dispatches a tuner onto bitsandbytes layers
    only where the tuner has a `bnb` module, and onto torchao tensors only for LoRA."""
    quantization = get_quantization(name)
    if method_name in quantization.refused:
        return f"{method_name} on {quantization.describe}: {quantization.refused[method_name]}"
    tuner = peft_type.lower()
    if quantization.tuner_module is None:
        if peft_type != "LORA":
            return f"{method_name} on {quantization.describe}: PEFT wraps only LoRA around torchao weights"
        return None
    module = f"peft.tuners.{tuner}.{quantization.tuner_module}"
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the tuner package itself is missing
        found = False
    if not found:
        return f"{method_name} on {quantization.describe}: PEFT has no layer for it (no {module})"
    return None


def operation_on_quantized_skip_reason(name: str, operation: str) -> str | None:
    """Why an operation cannot be exercised on a base quantized this way, or None."""
    if operation == "merge-unmerge":
        quantization = get_quantization(name)
        return f"merge-unmerge on {quantization.describe}: {quantization.merge_reason}"
    return None


def quantize(model, name: str, *, device: torch.device, dtype: torch.dtype | None):
    """The model with its linear layers (but the output head) quantized; returned in train mode."""
    quantization = get_quantization(name)
    reason = quantization_skip_reason(name)
    if reason:
        raise RuntimeError(reason)
    if quantization.package == "torchao":
        return _torchao_int8(model)
    return _bnb_4bit(model, quant_type=name.removeprefix("bnb-"), device=device, dtype=dtype)


def _torchao_int8(model):
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    head = model.get_output_embeddings()
    quantize_(
        model,
        # Not torchao's recommended inductor settings: they would change, for the whole process, what every later case
        # compiles (torchao 0.17 also sets float32 matmul precision). Version 2 (Int8Tensor) is 0.18's default; pinned
        # so that the tensor PEFT wraps does not follow the installed torchao.
        Int8WeightOnlyConfig(set_inductor_config=False, version=2),
        filter_fn=lambda module, _: isinstance(module, torch.nn.Linear) and module is not head,
    )
    return model


def _bnb_4bit(model, *, quant_type: str, device: torch.device, dtype: torch.dtype | None):
    from transformers import BitsAndBytesConfig

    compute_dtype = dtype or torch.float32
    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=quant_type, bnb_4bit_compute_dtype=compute_dtype)
    with tempfile.TemporaryDirectory(prefix="quantized-base-") as folder:
        model.save_pretrained(folder)
        loaded = type(model).from_pretrained(
            folder, quantization_config=config, dtype=compute_dtype, device_map={"": str(device)}
        )
    if device.type == "cpu":
        _same_kernel_on_every_cpu(loaded)
    return loaded.train()


def _same_kernel_on_every_cpu(model) -> None:
    """bitsandbytes repacks a 4-bit weight for its AVX512-BF16 CPU kernel in the first no-grad forward, on CPUs
    that have the instruction only, and the repacked weight changes shape under Dynamo's guards
    (docs/upstream-findings.md, 8). Pinned off, a case compiles the same code, and gets one verdict, on every CPU."""
    import bitsandbytes as bnb

    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = False

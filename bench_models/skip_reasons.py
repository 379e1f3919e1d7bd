"""Why a case cannot run: what the installed peft and packages lack, what a method declares in `cannot_run`, the
zoo-wide `ZOO_RULES`, and quantized bases."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping

from .installed_peft import operation_lacks, peft_lacks
from .methods import OPERATIONS, ZOO_RULES, Method, Selector, get_method
from .models import CAUSAL_LM, MODELS, SEQ_CLS, ModelSpec, get_spec
from .quantized import method_on_quantized_skip_reason, operation_on_quantized_skip_reason, quantization_skip_reason

# How a `cannot_run` reason reads in a skip message, by what its selector names.
_MESSAGES = {
    "task": "{method} does not support task {task} ({reason})",
    "architecture": "{method} on {arch}: {reason}",
    "operation": "PEFT does not support {operation} for {method}: {reason}",
    "pair": "{operation} for {method} on {selector}: {reason}",
}


def _message(kind: str, reason: str, method: Method, spec: ModelSpec, operation: str = "", selector: str = "") -> str:
    return _MESSAGES[kind].format(
        reason=reason, method=method.name, task=spec.task, arch=spec.arch, operation=operation, selector=selector
    )


def unknown_selectors(cannot_run: Mapping[Selector, str]) -> list[Selector]:
    """The selectors (a method's `cannot_run` keys, or ZOO_RULES') that name no architecture, task or operation."""
    known = {spec.arch for spec in MODELS.values()} | {CAUSAL_LM, SEQ_CLS}
    return [
        selector
        for selector in cannot_run
        if not (
            selector in known | set(OPERATIONS)
            or (isinstance(selector, tuple) and selector[0] in known and selector[1] in OPERATIONS)
        )
    ]


def skip_reason(model_key: str, method_name: str) -> str | None:
    """Why (model, method) cannot run here, or None."""
    spec = get_spec(model_key)
    method = get_method(method_name)
    lacking = peft_lacks(model_key, method_name)
    if lacking:
        return lacking
    if spec.task in method.cannot_run:
        return _message("task", method.cannot_run[spec.task], method, spec)
    if spec.arch in method.cannot_run:
        return _message("architecture", method.cannot_run[spec.arch], method, spec)
    missing = [pkg for pkg in method.requires if importlib.util.find_spec(pkg) is None]
    if missing:
        return f"{method.name} needs optional package(s) not installed: {', '.join(missing)}"
    if spec.quantization:
        return quantization_skip_reason(spec.quantization) or method_on_quantized_skip_reason(
            spec.quantization, method.name, method.peft_type
        )
    return None


def operation_skip_reason(model_key: str, method_name: str, operation: str) -> str | None:
    """Why `operation` cannot be exercised for (model, method), or None."""
    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r}; valid operations: {', '.join(OPERATIONS)}")
    reason = skip_reason(model_key, method_name)
    if reason:
        return reason
    method, spec = get_method(method_name), get_spec(model_key)
    if operation in method.cannot_run:
        return _message("operation", method.cannot_run[operation], method, spec, operation)
    lacking = operation_lacks(operation)
    if lacking:
        return lacking
    for selector in (spec.arch, spec.task):
        if (selector, operation) in method.cannot_run:
            return _message("pair", method.cannot_run[selector, operation], method, spec, operation, selector)
    if spec.quantization:
        reason = operation_on_quantized_skip_reason(spec.quantization, operation)
        if reason:
            return reason
    for selector in (spec.arch, spec.task):
        if (selector, operation) in ZOO_RULES:
            return ZOO_RULES[selector, operation].format(model=model_key, task=spec.task)
    return None

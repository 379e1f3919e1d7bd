"""Why a case cannot run: what the installed peft and packages lack, a method's limits (`TUNER_LIMITS` with its own
`cannot_run`, less its `lifts`), the zoo-wide `ZOO_RULES`, and quantized bases."""

from __future__ import annotations

import importlib.util

from .installed_peft import operation_lacks, peft_lacks
from .methods import OPERATIONS, ZOO_RULES, Architecture, Method, Operation, Task
from .models import ModelSpec, get_spec
from .quantized import method_on_quantized_skip_reason, operation_on_quantized_skip_reason, quantization_skip_reason
from .registry import get_method

# How a limit's reason reads in a skip message, by what its selector names.
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


def skip_reason(model_key: str, method_name: str) -> str | None:
    """Why (model, method) cannot run here, or None."""
    spec = get_spec(model_key)
    method = get_method(method_name)
    lacking = peft_lacks(model_key, method_name)
    if lacking:
        return lacking
    if Task(spec.task) in method.limits:
        return _message("task", method.limits[Task(spec.task)], method, spec)
    if Architecture(spec.arch) in method.limits:
        return _message("architecture", method.limits[Architecture(spec.arch)], method, spec)
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
    method, spec, selected = get_method(method_name), get_spec(model_key), Operation(operation)
    if selected in method.limits:
        return _message("operation", method.limits[selected], method, spec, operation)
    lacking = operation_lacks(operation)
    if lacking:
        return lacking
    wheres = (Architecture(spec.arch), Task(spec.task))
    for where in wheres:
        if selected.on(where) in method.limits:
            return _message("pair", method.limits[selected.on(where)], method, spec, operation, where.name)
    if spec.quantization:
        reason = operation_on_quantized_skip_reason(spec.quantization, operation)
        if reason:
            return reason
    for where in wheres:
        if selected.on(where) in ZOO_RULES:
            return ZOO_RULES[selected.on(where)].format(model=model_key, task=spec.task)
    return None

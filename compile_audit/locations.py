"""Short, clickable source locations for reports: ``peft/tuners/lora/layer.py:712``."""

from __future__ import annotations

import os
import sysconfig
import types

_PACKAGE_ROOT_MARKERS = ("site-packages", "dist-packages")


def short_path(filename: str) -> str:
    """Drop the environment-specific prefix so the same break reads the same on every machine."""
    parts = filename.replace("\\", "/").split("/")
    for marker in _PACKAGE_ROOT_MARKERS:
        if marker in parts:
            index = len(parts) - 1 - parts[::-1].index(marker)
            return "/".join(parts[index + 1 :])
    normalized = "/".join(parts)
    for root in (os.getcwd(), sysconfig.get_paths()["stdlib"]):  # the checkout; Python's own library (contextlib.py)
        prefix = root.replace("\\", "/").rstrip("/") + "/"
        if normalized.startswith(prefix):
            return normalized[len(prefix) :]
    return normalized


def location(filename: str, lineno: int | None) -> str:
    return f"{short_path(filename)}:{lineno if lineno is not None else '?'}"


def code_location(code: types.CodeType) -> str:
    """``forward at peft/peft_model.py:1001`` for a code object Dynamo compiled."""
    return f"{code.co_name} at {location(code.co_filename, code.co_firstlineno)}"

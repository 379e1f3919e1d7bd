"""Short, clickable source locations for reports: ``peft/tuners/lora/layer.py:712``."""

from __future__ import annotations

import functools
import os
import sysconfig
import types

from compile_audit.frames import Frame

_PACKAGE_ROOT_MARKERS = ("site-packages", "dist-packages")


@functools.cache
def _package_root(directory: str) -> str | None:
    """The folder holding the top-level package that ``directory`` belongs to (None when it is no package)."""
    if not os.path.isfile(os.path.join(directory, "__init__.py")):
        return None
    parent = os.path.dirname(directory)
    if parent == directory:
        return None
    return _package_root(parent) or parent


def short_path(filename: str) -> str:
    """Drop the environment-specific prefix so the same break reads the same on every machine: the path from the
    top-level package on, whether the package is installed (site-packages), editable or a source tree on sys.path
    (``/home/u/peft/src/peft/peft_model.py`` reads ``peft/peft_model.py``)."""
    parts = filename.replace("\\", "/").split("/")
    for marker in _PACKAGE_ROOT_MARKERS:
        if marker in parts:
            index = len(parts) - 1 - parts[::-1].index(marker)
            return "/".join(parts[index + 1 :])
    normalized = "/".join(parts)
    if os.path.isabs(filename):
        root = _package_root(os.path.dirname(filename))
        if root is not None:
            return os.path.relpath(filename, root).replace("\\", "/")
    for root in (os.getcwd(), sysconfig.get_paths()["stdlib"]):  # the checkout; Python's own library (contextlib.py)
        prefix = root.replace("\\", "/").rstrip("/") + "/"
        if normalized.startswith(prefix):
            return normalized[len(prefix) :]
    return normalized


def location(filename: str, lineno: int | None) -> str:
    return f"{short_path(filename)}:{lineno if lineno is not None else '?'}"


def code_location(code: types.CodeType) -> str:
    """``forward at peft/peft_model.py:1001`` for a code object Dynamo compiled."""
    return str(Frame(code.co_name, short_path(code.co_filename), code.co_firstlineno))

"""scripts/gate.py imported as a module (scripts/ is not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

GATE_PY = Path(__file__).resolve().parents[2] / "scripts" / "gate.py"


def load_gate():
    spec = importlib.util.spec_from_file_location("scripts_gate", GATE_PY)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


gate = load_gate()

"""What the installed peft has: a method's PeftType, config class, options and other APIs, and the APIs of the
lifecycle operations. A method or operation it lacks is a skip with the reason, never an import error."""

from __future__ import annotations

import dataclasses
import importlib
import types

import peft

from .config_builders import Options
from .models import get_spec
from .registry import get_method

# Lifecycle operations that need a PEFT API beyond get_peft_model, as dotted names.
OPERATION_PEFT_APIS: dict[str, tuple[str, ...]] = {
    "hotswap": ("peft.utils.hotswap.hotswap_adapter", "peft.utils.hotswap.prepare_model_for_compiled_hotswap"),
}


def _resolves(dotted: str) -> bool:
    """Whether a dotted name ("peft.PveraConfig", "peft.PeftType.LORA", "peft.utils.hotswap.x") is installed."""
    head, *rest = dotted.split(".")
    obj = importlib.import_module(head)
    for part in rest:
        if hasattr(obj, part):
            obj = getattr(obj, part)
        elif isinstance(obj, types.ModuleType):
            try:
                obj = importlib.import_module(f"{obj.__name__}.{part}")
            except ImportError:
                return False
        else:
            return False
    return True


def _missing_apis(names) -> list[str]:
    return [name for name in names if not _resolves(name)]


def _unknown_options(config_class, options: Options) -> list[str]:
    """The option names the config class does not declare (PEFT configs are dataclasses)."""
    if not dataclasses.is_dataclass(config_class):
        return []
    return sorted(set(options) - {f.name for f in dataclasses.fields(config_class)})


def _not_in_peft(what: str, detail: str) -> str:
    return f"{what}: not in peft {peft.__version__} ({detail})"


def peft_lacks(model_key: str, method_name: str) -> str | None:
    """Why the installed peft cannot build the method (its PeftType, config class, an option or API), or None."""
    method, spec = get_method(method_name), get_spec(model_key)
    needed = (f"peft.PeftType.{method.peft_type}", f"peft.{method.config_class}", *method.peft_apis)
    missing = _missing_apis(needed)
    if missing:
        return _not_in_peft(method.name, f"no {', '.join(missing)}")
    # rank and dropout given, so that the options they switch on are checked too.
    options = method.options(spec, rank=8, dropout=0.0)
    unknown = _unknown_options(getattr(peft, method.config_class), options)
    if unknown:
        return _not_in_peft(method.name, f"{method.config_class} has no option {', '.join(unknown)}")
    return None


def operation_lacks(operation: str) -> str | None:
    """Why the installed peft cannot run `operation` (an API it needs is missing), or None."""
    missing = _missing_apis(OPERATION_PEFT_APIS.get(operation, ()))
    if missing:
        return _not_in_peft(operation, f"no {', '.join(missing)}")
    return None

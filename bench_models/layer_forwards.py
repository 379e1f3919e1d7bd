"""The installed PEFT's layer forwards: the ``forward`` and ``_mixed_batch_forward`` that a class of one of PEFT's
layer bases (LAYER_BASES) defines itself, in a module under ``peft.tuners``, as function keys
(``peft/tuners/lora/layer.py::Linear.forward``, the footprints' form). Inherited methods count once, where they are
defined; a module that cannot be imported (an optional backend missing) is named, never an error."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import types
from collections.abc import Iterable
from pathlib import Path

from .quiet_imports import quiet_optional_backends

with quiet_optional_backends():
    import peft
    import peft.tuners

FORWARDS = ("forward", "_mixed_batch_forward")


@dataclasses.dataclass(frozen=True)
class LayerBase:
    dotted: str  # module.Class; a base the installed peft lacks is left out
    why: str
    counts_itself: bool = True  # False: the base is an interface whose own methods are stubs


LAYER_BASES = (
    LayerBase("peft.tuners.tuners_utils.BaseTunerLayer", "every method's adapter layers (LoraLayer, IA3Layer, ...)"),
    LayerBase(
        "peft.tuners.lora.layer.LoraVariant",
        "LoRA's variants (DoRA, KaSA, aLoRA, ...): a LoRA layer's forward hands over to its variant's",
        counts_itself=False,
    ),
    LayerBase("peft.tuners.lora.dora.DoraLinearLayer", "DoRA's magnitude layers, called by the DoRA variants"),
    LayerBase("peft.tuners.xlora.layer.XLoraLayer", "X-LoRA's layers, wrapping the LoRA layers they mix"),
)


@dataclasses.dataclass(frozen=True)
class LayerForwards:
    keys: tuple[str, ...]  # sorted function keys
    not_inspected: dict[str, str]  # module -> why it could not be imported


def resolve(dotted: str) -> type | None:
    """The class a dotted name names, or None where the installed package lacks it."""
    module_name, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), name, None)
    except ImportError:
        return None


def tuner_modules(package: types.ModuleType) -> tuple[list[types.ModuleType], dict[str, str]]:
    """Every module of the package, imported, and those that could not be, with the error."""
    modules, failed = [], {}
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.", onerror=lambda name: None):
        try:
            with quiet_optional_backends():
                modules.append(importlib.import_module(info.name))
        except Exception as error:  # an optional backend's import error is the backend's, not ours
            failed[info.name] = f"{type(error).__name__}: {error}"
    return modules, failed


def _own_functions(cls: type) -> list[types.FunctionType]:
    """The layer forwards a class defines itself (a staticmethod's function, a decorated one unwrapped)."""
    found = []
    for name in FORWARDS:
        attribute = vars(cls).get(name)
        function = inspect.unwrap(getattr(attribute, "__func__", attribute)) if attribute is not None else None
        if isinstance(function, types.FunctionType):
            found.append(function)
    return found


def _is_layer(cls: type, bases: Iterable[LayerBase], resolved: dict[str, type]) -> bool:
    return any(
        base.dotted in resolved
        and issubclass(cls, resolved[base.dotted])
        and (base.counts_itself or cls is not resolved[base.dotted])
        for base in bases
    )


def function_key(function: types.FunctionType, root: Path) -> str | None:
    """``FILE::QUALNAME`` with FILE relative to ``root`` (the folder holding the package), or None outside it."""
    try:
        path = Path(function.__code__.co_filename).resolve().relative_to(root.resolve())
    except ValueError:
        return None
    return f"{path.as_posix()}::{function.__code__.co_qualname}"


def forwards_in(modules: Iterable[types.ModuleType], bases: Iterable[LayerBase], root: Path) -> tuple[str, ...]:
    """The layer forwards the classes defined in these modules define themselves, as sorted function keys."""
    bases = tuple(bases)
    resolved = {base.dotted: cls for base in bases if (cls := resolve(base.dotted)) is not None}
    keys = set()
    for module in modules:
        for cls in vars(module).values():
            if inspect.isclass(cls) and cls.__module__ == module.__name__ and _is_layer(cls, bases, resolved):
                keys |= {key for function in _own_functions(cls) if (key := function_key(function, root))}
    return tuple(sorted(keys))


def installed_layer_forwards() -> LayerForwards:
    """The installed PEFT's layer forwards, keyed as ``tests/footprints.json`` keys functions."""
    modules, failed = tuner_modules(peft.tuners)
    root = Path(peft.__file__).resolve().parent.parent
    return LayerForwards(forwards_in(modules, LAYER_BASES, root), failed)

"""Methods the registry does not know yet, derived from what the installed PEFT declares.

A pull request that adds a PEFT method adds a ``PeftType`` member and registers a config class and a tuner class
(``register_peft_method``). Each such ``PeftType`` with no entry in ``methods._METHOD_LIST`` is a **derived method**:

- its config is the config class's defaults, with ``task_type`` and, for a tuner, ``target_modules``: PEFT's own
  per-architecture mapping where the tuner declares one (``target_module_mapping``), else every linear layer
  (``"all-linear"``, which leaves the output layer out);
- what it can run is read from its classes: it merges where its layers override ``BaseTunerLayer.merge``, and mixes
  adapters in a batch where they implement ``_mixed_batch_forward``; a prompt-learning config adds virtual tokens,
  nothing to merge.

A registry entry written for the method refines it: the method is then no longer derived. A config the defaults
cannot build (a required argument, a size larger than a tiny layer) fails its cases with PEFT's error.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable, Mapping

from .config_builders import NUM_VIRTUAL_TOKENS, PEFT_TASK_TYPES, Options
from .methods import _NO_WEIGHTS_TO_MERGE, Method, Operation, Selector
from .models import ModelSpec

ALL_LINEAR = "all-linear"
DERIVED_NOTE = "derived from what PEFT declares (config defaults, target-module mapping); no registry entry yet"


def method_name(peft_type: str) -> str:
    """The case-id name of a derived method: ``NEW_LORA`` -> ``new-lora``."""
    return peft_type.lower().replace("_", "-")


def _tuner_layers(tuner_class: type) -> list[type]:
    """The layer classes of the tuner's package (``peft.tuners.<name>.layer``), those derived from BaseTunerLayer."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    package = tuner_class.__module__.rpartition(".")[0]
    found = []
    for module_name in (f"{package}.layer", tuner_class.__module__):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        found += [
            cls
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, BaseTunerLayer) and cls is not BaseTunerLayer and cls.__module__ == module.__name__
        ]
    return list(dict.fromkeys(found))


def _limits_of(layers: Iterable[type]) -> tuple[dict[Selector, str], dict[Selector, str]]:
    """(cannot_run, lifts) read from the method's layer classes."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = list(layers)
    cannot_run: dict[Selector, str] = {}
    lifts: dict[Selector, str] = {}
    if not any(getattr(cls, "merge", None) is not BaseTunerLayer.merge for cls in layers):
        cannot_run[Operation("merge-unmerge")] = "its layers do not override BaseTunerLayer.merge"
    if any(hasattr(cls, "_mixed_batch_forward") for cls in layers):
        lifts[Operation("mixed-batch")] = "its layers implement _mixed_batch_forward (adapter_names)"
    return cannot_run, lifts


def _target_mapping(peft_type: str, tuner_class: type | None) -> Mapping[str, object]:
    """The tuner's per-architecture target modules: its ``target_module_mapping``, else PEFT's constant named for
    the PeftType (``TRANSFORMERS_MODELS_TO_<TYPE>_TARGET_MODULES_MAPPING``)."""
    from peft.utils import constants

    declared = getattr(tuner_class, "target_module_mapping", None)
    return declared or getattr(constants, f"TRANSFORMERS_MODELS_TO_{peft_type}_TARGET_MODULES_MAPPING", None) or {}


def _target_modules(mapping: Mapping[str, object], spec: ModelSpec) -> object:
    model_type = spec.config_dict().get("model_type", "")
    return list(mapping[model_type]) if model_type in mapping else ALL_LINEAR


def _options_for(config_class: type, mapping: Mapping[str, object], prompt_learning: bool):
    fields = set(getattr(config_class, "__dataclass_fields__", {}))

    def options(spec: ModelSpec, *, rank=None, dropout=None) -> Options:
        kwargs: Options = {"task_type": PEFT_TASK_TYPES.get(spec.task)}
        if prompt_learning:
            kwargs["num_virtual_tokens"] = NUM_VIRTUAL_TOKENS
        elif "target_modules" in fields:
            kwargs["target_modules"] = _target_modules(mapping, spec)
        return kwargs

    return options


def derive_method(peft_type: str, config_class: type, tuner_class: type | None) -> Method:
    """The derived method of one PeftType, from its config class and tuner class (None for prompt learning)."""
    from peft import PromptLearningConfig

    prompt_learning = issubclass(config_class, PromptLearningConfig) or tuner_class is None
    if prompt_learning:
        cannot_run, lifts = dict(_NO_WEIGHTS_TO_MERGE), {}
    else:
        cannot_run, lifts = _limits_of(_tuner_layers(tuner_class))
    return Method(
        method_name(peft_type),
        peft_type,
        config_class.__name__,
        _options_for(config_class, _target_mapping(peft_type, tuner_class), prompt_learning),
        cannot_run=cannot_run,
        lifts=lifts,
        note=DERIVED_NOTE,
        derived=True,
    )


def derived_methods(known: Mapping[str, Method], excluded: Iterable[str]) -> dict[str, Method]:
    """A derived method for every PeftType of the installed peft that no known method covers nor is excluded."""
    import peft
    from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING, PEFT_TYPE_TO_TUNER_MAPPING

    covered = {method.peft_type for method in known.values()} | set(excluded)
    found = {}
    for peft_type in peft.PeftType:
        # By name: the mappings are keyed by PeftType members, a str enum whose values are their names.
        name = peft_type.name
        if name in covered or name not in PEFT_TYPE_TO_CONFIG_MAPPING:
            continue
        method = derive_method(name, PEFT_TYPE_TO_CONFIG_MAPPING[name], PEFT_TYPE_TO_TUNER_MAPPING.get(name))
        if method.name in known:
            raise ValueError(
                f"derived method {method.name!r} (PeftType {peft_type.name}) clashes with a registry entry"
            )
        found[method.name] = method
    return found

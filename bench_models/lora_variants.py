"""LoRA's variants as methods, each derived from what the installed PEFT declares.

PEFT declares a LoRA variant in three places (``peft/tuners/lora``):

- a ``LoraConfig`` field whose metadata has ``is_lora_variant`` (``kasa_config``, ``use_bdlora``, ...);
- a value of ``init_lora_weights`` listed in that field's metadata ``lora_variants`` (``"mica"``);
- each layer class's ``lora_variants`` property: a sorted tuple of variant names -> the variant class for that layer
  kind (``Linear.lora_variants[("kasa_config",)] is KasaLinearVariant``).

Each variant is a method ``lora-<name>`` (``kasa_config`` -> ``lora-kasa``, ``use_bdlora`` -> ``lora-bdlora``):

- its config is the registry's LoRA options on the attention projections (Linear layers) with the variant switched on:
  ``True`` for a flag, the config class's defaults for a config field, the value declared by name in
  ``methods.LORA_VARIANTS`` where defaults cannot give one (aLoRA's invocation tokens);
- what it can run is read from its Linear variant class: it merges unless ``merge_safe``, ``merge_unsafe`` or
  ``unmerge`` only raises (or is LoraVariant's own); it mixes adapters in a batch where the layer class has
  ``_mixed_batch_forward`` (which hands each sub-batch to the variant's forward);
- it is **derived** (run as a new case, judged by the causes) until ``methods.LORA_VARIANTS`` names it, which the
  person who records its budgets writes. A variant a registry entry already configures (``lora-dora`` sets
  ``use_dora``) and one in ``methods.EXCLUDED_LORA_VARIANTS`` get no method here.

A variant runs on the registry's LoRA targets of each architecture (``ModelSpec.attention_modules``): Linear layers,
or a convolutional network's Conv2d, or nn.MultiheadAttention (``ModelSpec.target_kind``). Where that layer class
declares no class for the variant, the architecture is a skip that says so; what it can run (merging) is read from
its Linear variant class. On the input embedding it is a method of its own (``bench_models.embedding_methods``).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from . import config_builders as options
from .config_builders import Deferred, Options
from .methods import ARCHITECTURES, Architecture, KnownVariant, Method, Operation, Selector
from .models import MODELS, ModelSpec

INIT_FIELD = "init_lora_weights"
TARGETED_KIND = "Linear"
_MERGE_FUNCTIONS = ("merge_safe", "merge_unsafe", "unmerge")
_HOTSWAP = "PEFT's hotswap_adapter swaps lora_A, lora_B and the scalings, not a variant's own state"
DERIVED_VARIANT_NOTE = "derived from PEFT's declarations (no entry in LORA_VARIANTS yet)"


class Declared(NamedTuple):
    """One variant as PEFT declares it: the LoraConfig field that switches it on and the value derived for it
    (None: defaults cannot give one)."""

    field: str
    value: Callable[[ModelSpec], object] | None


# ------------------------------------------------------------------------------ what PEFT declares


def method_name(variant: str) -> str:
    """``kasa_config`` -> ``lora-kasa``, ``use_dora`` -> ``lora-dora``, ``mica`` -> ``lora-mica``."""
    return "lora-" + variant.removeprefix("use_").split("_")[0]


def _config_class_in(annotation: object) -> type | None:
    """The dataclass a config field's annotation names (``Optional[Union[VeloraConfig, dict]]`` -> VeloraConfig)."""
    candidates = typing.get_args(annotation) or (annotation,)
    return next((c for c in candidates if isinstance(c, type) and dataclasses.is_dataclass(c)), None)


def _derived_value(annotation: object) -> Callable[[ModelSpec], object] | None:
    if annotation is bool:
        return lambda spec: True
    config_class = _config_class_in(annotation)
    return None if config_class is None else lambda spec: config_class()


def declared_variants(config_class: type) -> dict[str, Declared]:
    """Variant name -> how it is declared: the ``is_lora_variant`` fields of ``config_class`` and the variants of
    its ``init_lora_weights``."""
    hints = typing.get_type_hints(config_class)
    found: dict[str, Declared] = {}
    for spec_field in dataclasses.fields(config_class):
        if spec_field.metadata.get("is_lora_variant"):
            found[spec_field.name] = Declared(spec_field.name, _derived_value(hints[spec_field.name]))
        for value in spec_field.metadata.get("lora_variants", ()) if spec_field.name == INIT_FIELD else ():
            found[value] = Declared(INIT_FIELD, lambda spec, value=value: value)
    return found


def _layer_classes() -> list[type]:
    """PEFT's LoRA layer classes that declare ``lora_variants`` (Linear, Embedding, Conv1d/2d/3d, ...)."""
    from peft.tuners.lora import layer

    return [
        cls
        for _, cls in inspect.getmembers(layer, inspect.isclass)
        if cls.__module__ == layer.__name__ and isinstance(inspect.getattr_static(cls, "lora_variants", None), property)
    ]


def layer_variants(layer_class: type) -> dict[str, type]:
    """Variant name -> the layer class's variant class, from its ``lora_variants`` property (single variants only;
    the property reads nothing of the instance)."""
    mapping = inspect.getattr_static(layer_class, "lora_variants").fget(None)
    return {key[0]: cls for key, cls in mapping.items() if len(key) == 1 and cls is not None}


def variant_classes() -> dict[str, dict[str, type]]:
    """Variant name -> {layer kind: variant class}, for every layer class of the installed peft."""
    found: dict[str, dict[str, type]] = {}
    for layer_class in _layer_classes():
        for variant, cls in layer_variants(layer_class).items():
            found.setdefault(variant, {})[layer_class.__name__] = cls
    return found


# ------------------------------------------------------------------------------ what a variant can run


def _only_raises(function: Callable) -> str | None:
    """The exception a function's body only raises (its docstring aside), or None (it does something, or its source
    cannot be read)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return None
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.FunctionDef) else []
    statements = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(statements) != 1 or not isinstance(statements[0], ast.Raise) or statements[0].exc is None:
        return None
    raised = statements[0].exc
    raised = raised.func if isinstance(raised, ast.Call) else raised
    return getattr(raised, "id", None) or getattr(raised, "attr", "an exception")


def merge_limit(variant_class: type) -> str | None:
    """Why the variant class cannot merge, or None: a merge function it leaves to LoraVariant or that only raises."""
    from peft.tuners.lora.layer import LoraVariant

    for name in _MERGE_FUNCTIONS:
        function = inspect.getattr_static(variant_class, name)
        if function is inspect.getattr_static(LoraVariant, name):
            return f"{variant_class.__name__} does not implement {name} (LoraVariant's own)"
        raised = _only_raises(getattr(variant_class, name))
        if raised:
            return f"{variant_class.__name__}.{name} raises {raised}"
    return None


def _target_kinds() -> dict[str, str]:
    """Architecture -> the LoRA layer class its default targets get (one per architecture)."""
    return {spec.arch: spec.target_kind for spec in MODELS.values()}


def _not_on_kind(variant: str, kinds: Iterable[str]) -> dict[Selector, str]:
    """The architectures whose targets' layer class declares no class for the variant, each with the reason."""
    kinds = sorted(kinds)
    where = f"for {', '.join(kinds)} only" if kinds else "in no layer class's lora_variants"
    return {
        Architecture(arch): f"PEFT declares {variant} {where}; this architecture's LoRA targets are {kind}"
        for arch, kind in _target_kinds().items()
        if kind not in kinds and arch in ARCHITECTURES
    }


def _limits(variant: str, classes: Mapping[str, type], known: KnownVariant):
    """(cannot_run, lifts) of the variant, read from its Linear variant class, then what the registry adds."""
    from peft.tuners.lora.layer import Linear

    cannot_run: dict[Selector, str] = {Operation("hotswap"): _HOTSWAP}
    lifts: dict[Selector, str] = {}
    cannot_run.update(_not_on_kind(variant, classes))
    if TARGETED_KIND in classes and merge_limit(classes[TARGETED_KIND]):
        cannot_run[Operation("merge-unmerge")] = merge_limit(classes[TARGETED_KIND])
    cannot_run.update(known.cannot_run)
    cannot_run = {selector: reason for selector, reason in cannot_run.items() if selector not in known.lifts}
    if hasattr(Linear, "_mixed_batch_forward") and Operation("mixed-batch") not in cannot_run:
        lifts[Operation("mixed-batch")] = "Linear._mixed_batch_forward hands each sub-batch to the variant's forward"
    return cannot_run, {**lifts, **known.lifts}


# ------------------------------------------------------------------------------ the methods


def _no_default(name: str, field: str):
    raise ValueError(f"{name}: PEFT's {field} has no default to derive; give its value in methods.LORA_VARIANTS")


def _options_for(declared: Declared, value: Callable[[ModelSpec], object] | None, name: str):
    def variant_options(spec: ModelSpec, *, rank=None, dropout=None) -> Options:
        given = Deferred(lambda: value(spec) if value else _no_default(name, declared.field))
        return options.lora_options(spec, rank, dropout, **{declared.field: given})

    return variant_options


def _note(variant: str, classes: Mapping[str, type], known: KnownVariant | None) -> str:
    kinds = f"; PEFT declares it for {', '.join(sorted(classes))}" if classes else ""
    return (known.note if known and known.note else DERIVED_VARIANT_NOTE) + kinds


def variant_method(
    variant: str, declared: Declared, classes: Mapping[str, type], known: KnownVariant | None = None
) -> Method:
    """The method of one variant: derived unless ``known`` (its LORA_VARIANTS entry) is given."""
    entry = known or KnownVariant()
    cannot_run, lifts = _limits(variant, classes, entry)
    name = method_name(variant)
    return Method(
        name,
        "LORA",
        "LoraConfig",
        _options_for(declared, entry.value or declared.value, name),
        cannot_run=cannot_run,
        lifts=lifts,
        note=_note(variant, classes, known),
        batch_token_ids=entry.batch_token_ids,
        derived=known is None,
        companions=entry.companions,
    )


def _switches_on(kwargs: Options, variant: str, declared: Declared) -> bool:
    value = kwargs.get(declared.field)
    return value == variant if declared.field == INIT_FIELD else bool(value)


def _configured_by(registered: Mapping[str, Method], declared: Mapping[str, Declared], spec: ModelSpec) -> set[str]:
    """The variants a registry entry switches on already (lora-dora sets use_dora)."""
    kwargs = [m.options(spec) for m in registered.values() if m.config_class == "LoraConfig"]
    return {variant for variant, how in declared.items() if any(_switches_on(k, variant, how) for k in kwargs)}


def lora_variant_methods(
    registered: Mapping[str, Method], known: Mapping[str, KnownVariant], excluded: Iterable[str]
) -> dict[str, Method]:
    """A method for every variant the installed peft declares (and every one ``known`` names, which an older peft
    skips with the reason), but those a registry entry switches on and the ``excluded``."""
    from peft import LoraConfig

    from .models import get_spec

    declared, classes = declared_variants(LoraConfig), variant_classes()
    skipped = _configured_by(registered, declared, get_spec("llama-tiny")) | set(excluded)
    found: dict[str, Method] = {}
    for variant in dict.fromkeys([*declared, *classes, *known]):
        if variant in skipped:
            continue
        how = declared.get(variant, Declared(variant, None))
        method = variant_method(variant, how, classes.get(variant, {}), known.get(variant))
        if method.name in registered or method.name in found:
            raise ValueError(f"LoRA variant {variant!r}: its method name {method.name!r} is taken")
        found[method.name] = method
    return found

"""The methods the zoo compiles: the registry's entries (:mod:`bench_models.methods`), a method for every LoRA variant
the installed peft declares (:mod:`bench_models.lora_variants`), then a derived method for every PeftType of the
installed peft they do not cover (:mod:`bench_models.derived_methods`). Methods whose tuner adapts an embedding run
on it too (:mod:`bench_models.embedding_methods`)."""

from __future__ import annotations

from .derived_methods import derived_methods
from .embedding_methods import embedding_methods
from .lora_variants import lora_variant_methods
from .methods import EMBEDDING_LAYERS, EXCLUDED_LORA_VARIANTS, EXCLUDED_PEFT_TYPES, LORA_VARIANTS, REGISTERED, Method

_KNOWN = {**REGISTERED, **lora_variant_methods(REGISTERED, LORA_VARIANTS, EXCLUDED_LORA_VARIANTS)}
METHODS: dict[str, Method] = {
    **_KNOWN,
    **embedding_methods(_KNOWN, EMBEDDING_LAYERS),
    **derived_methods(REGISTERED, EXCLUDED_PEFT_TYPES),
}


def get_method(method_name: str) -> Method:
    try:
        return METHODS[method_name]
    except KeyError:
        raise ValueError(f"unknown method {method_name!r}; valid methods: {', '.join(METHODS)}") from None

"""The methods the zoo compiles: the registry's entries (:mod:`bench_models.methods`), then a derived method for
every PeftType of the installed peft they do not cover (:mod:`bench_models.derived_methods`)."""

from __future__ import annotations

from .derived_methods import derived_methods
from .methods import EXCLUDED_PEFT_TYPES, REGISTERED, Method

METHODS: dict[str, Method] = {**REGISTERED, **derived_methods(REGISTERED, EXCLUDED_PEFT_TYPES)}


def get_method(method_name: str) -> Method:
    try:
        return METHODS[method_name]
    except KeyError:
        raise ValueError(f"unknown method {method_name!r}; valid methods: {', '.join(METHODS)}") from None

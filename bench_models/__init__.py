"""Models, PEFT methods and workloads for the torch.compile regression gate.

Everything is built from configs with random weights; nothing is downloaded. This package never imports
compile_audit or pytest.
"""

from .quiet_imports import quiet_optional_backends

with quiet_optional_backends():
    import peft  # noqa: F401  (first, here: its optional backends' import-time warnings stay quiet)

from .installed_peft import peft_lacks
from .methods import EXCLUDED_PEFT_TYPES, OPERATIONS, Method
from .models import MODELS, ModelSpec, build_base_model, get_spec, library_versions
from .peft_models import add_adapter, build_method_base, build_peft_model
from .registry import METHODS, get_method
from .skip_reasons import operation_skip_reason, skip_reason
from .slices import CORE_METHODS
from .workloads import eval_step, make_batch, make_optimizer, model_inputs, set_kv_cache, train_step

__all__ = [
    "CORE_METHODS",
    "EXCLUDED_PEFT_TYPES",
    "METHODS",
    "MODELS",
    "OPERATIONS",
    "Method",
    "ModelSpec",
    "add_adapter",
    "build_base_model",
    "build_method_base",
    "build_peft_model",
    "eval_step",
    "get_method",
    "get_spec",
    "library_versions",
    "make_batch",
    "make_optimizer",
    "model_inputs",
    "operation_skip_reason",
    "peft_lacks",
    "set_kv_cache",
    "skip_reason",
    "train_step",
]

"""One-off rewrite of a budgets file from the old format (generated "Dynamo: ..." notes on every entry, line numbers,
entries equal to the default) to the reviewable one: causes written once, nothing derivable, nothing that moves.

    python scripts/rewrite_budgets_with_causes.py tests/compile_budgets.toml

What it does to each entry: a generated note goes (the causes below explain its signatures; the failure message
and the report carry the detail); known-failure reasons lose line numbers and phase names; signatures lose the
line in a resume function's name (as compile_audit.normalize now writes them); an entry that says no more than the
default goes. Hand-written notes and the counts stay. It stops with the entries no cause explains."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compile_audit.budgets import KNOWN_FAILURE_FIELDS, BudgetFile
from compile_audit.causes import Cause
from compile_audit.normalize import normalize
from gate_tools.stable_text import stable

GENERATED_NOTE = "Dynamo: "
DDP_NOTE = (
    "DDPOptimizer splits the graph at DDP's gradient bucket boundaries (See Note [DDPOptimizer]): intended pieces "
    "that stay compiled, not graph breaks."
)

# name: (note, link, signature patterns). The notes summarise what Dynamo reports at these sites, in one place.
CAUSES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "transformers-deprecation-wrapper": (
        "transformers' deprecate_kwarg decorator wraps model forwards in wrapped_func(*args, **kwargs). Dynamo "
        "compiles it as a frame of its own and guards on the call: the number of args, the module's type, its "
        "parameters' requires_grad, the cache's state. Every new caller (one after each graph break) or call shape "
        "recompiles it, and a model cut into many frames reaches the recompile limit.",
        "",
        ("wrapped_func at transformers/utils/deprecation.py*", "transformers/utils/deprecation.py in *"),
    ),
    "transformers-output-wrappers": (
        "transformers' output wrappers (can_return_tuple / check_model_inputs in utils/generic.py, the output "
        "capturing hooks) guard on the call's kwargs (return_dict present or not, the cache initialised or not) "
        "and log through logging.Logger, which Dynamo does not trace: a recompile per kwargs shape, and a break "
        "(or the frame run eagerly) where they log or install hooks.",
        "",
        (
            "wrapper at transformers/utils/generic.py: *",
            "transformers/utils/generic.py in wrapper: *",
            "* at transformers/utils/output_capturing.py: *",
            "transformers/utils/output_capturing.py in *",
        ),
    ),
    "peft-model-adapter-state-guards": (
        "PeftModel.forward and BaseTuner.forward read the adapter state (active_adapter, merged_adapters, "
        "_adapters_disabled, the adapters' requires_grad, pre-forward hooks, grad mode). Dynamo guards on each, so "
        "every lifecycle operation that changes it (set_adapter, merge, disable_adapter, add_adapter, train/eval) "
        "recompiles the frame once per new state.",
        "",
        (
            "forward at peft/peft_model.py: *",
            "get_prompt at peft/peft_model.py: *",
            "forward at peft/tuners/tuners_utils.py: *",
            "get_base_weight at peft/tuners/tuners_utils.py: *",
            "peft/tuners/tuners_utils.py in *",
            "peft/utils/other.py in _set_layer_requires_grad: *",
        ),
    ),
    "peft-model-forward-runs-eagerly": (
        "PeftModel.forward filters kwargs with a dict comprehension over kwargs.items() (Dynamo: Missing "
        "tp_iternext); once a break below it cannot be resumed, Dynamo runs the whole forward eagerly and compiles "
        "only the frames it calls (the peft#3558 class).",
        "https://github.com/huggingface/peft/pull/3558",
        ("peft/peft_model.py in <dictcomp>: *", "peft/peft_model.py in forward: *"),
    ),
    "resume-frames-after-a-break": (
        "After a graph break Dynamo compiles the rest of the function as a resume function and guards on what is "
        "live at the break (tensor sizes and requires_grad, the cache, adapter attributes). A phase that changes "
        "any of them recompiles it. The break itself is budgeted in the same case.",
        "",
        ("torch_dynamo_resume_in_* at *: *", "* in torch_dynamo_resume_in_*: *"),
    ),
    "transformers-model-forwards": (
        "The model forwards (Llama, Qwen2, OPT, BERT, the causal mask, gradient-checkpointing layers) guard on the "
        "shapes and requires_grad of their inputs and on the cache's layers: a scenario that changes them "
        "(dynamic shapes, a frozen base, merged or disabled adapters) recompiles them; where a break under them "
        "cannot be resumed, the forward runs eagerly.",
        "",
        (
            "forward at transformers/models/*: *",
            "transformers/models/* in forward: *",
            "* at transformers/masking_utils.py: *",
            "forward_with_checkpointing at transformers/modeling_layers.py: *",
        ),
    ),
    "gradient-checkpointing-input-grads": (
        "With gradient checkpointing, PEFT calls enable_input_require_grads: transformers registers a forward "
        "hook that calls output.requires_grad_(), and Dynamo breaks on a requires_grad_() intermediate leaked as "
        "an output.",
        "",
        ("transformers/modeling_utils.py in make_inputs_require_grads: *",),
    ),
    "dora-dequantize-weight": (
        "DoRA reads the base weight through dequantize_module_weight, which tests "
        "type(module.weight).__module__.startswith('torchao.'): Dynamo does not trace str.startswith there and "
        "breaks, once per DoRA layer and call; the weight norm is then guarded on the weight's shape per layer.",
        "",
        (
            "peft/utils/integrations.py in dequantize_module_weight: *",
            "dequantize_module_weight at peft/utils/integrations.py: *",
            "* at peft/tuners/lora/dora.py: *",
            "peft/tuners/lora/dora.py in *",
            "* at peft/tuners/lora/variants.py: *",
            "peft/tuners/lora/layer.py in forward: *",
        ),
    ),
    "loha-lokr-data-dependent-branch": (
        "LoHa's and LoKr's forward branch on a tensor's value (data-dependent branching): a break per adapted "
        "layer, and _get_delta_activations is guarded on each layer's weight shape and adapter name.",
        "",
        (
            "peft/tuners/loha/* in *: *",
            "* at peft/tuners/loha/*: *",
            "peft/tuners/lokr/* in *: *",
            "* at peft/tuners/lokr/*: *",
        ),
    ),
    "cpt-dynamic-shapes": (
        "CPT's projection and loss use data-dependent branching and dynamic-shape operators (masking by token "
        "type), which Dynamo breaks on; _cpt_forward in peft_model.py does the same.",
        "",
        ("peft/tuners/cpt/* in *: *", "peft/peft_model.py in _cpt_forward: *", "_cpt_forward at peft/peft_model.py: *"),
    ),
    "frod-sparse-tensors": (
        "FRoD builds its adapter from sparse tensors: Dynamo breaks on data-dependent operators, on a function "
        "marked as skipped and on wrapping a sparse tensor, and guards on each layer's frod_U shape.",
        "",
        ("peft/tuners/frod/* in *: *", "* at peft/tuners/frod/*: *"),
    ),
    "waveft-wavelet-reconstruction": (
        "WaveFT's get_delta_weight scatters its spectrum with a dynamic-shape operator (a break), and the wavelet "
        "reconstruction (waverec2d) maps over coefficient trees and checks device and dtype: guards on the "
        "coefficients' ranks and sizes and on the mapped function's code, so each layer shape recompiles it.",
        "",
        ("peft/tuners/waveft/* in *: *", "* at peft/tuners/waveft/*: *"),
    ),
    "shira-sparse-delta": (
        "ShiRA's get_delta_weight builds a sparse delta: Dynamo breaks on a function marked as skipped (the "
        "copy.deepcopy peft#3321 later removed) and guards on each layer's shira_weight shape and indices.",
        "https://github.com/huggingface/peft/pull/3321",
        ("peft/tuners/shira/* in *: *", "* at peft/tuners/shira/*: *"),
    ),
    "poly-router-item": (
        "Poly's router calls Tensor.item() (Dynamo does not capture scalar outputs by default) and registers "
        "pre-forward hooks per call: a break per routed layer.",
        "",
        ("peft/tuners/poly/* in *: *", "* at peft/tuners/poly/*: *"),
    ),
    "vblora-data-dependent-branch": (
        "VB-LoRA's _get_lora_matrices branches on a tensor's value (top-k over the vector bank): a break per layer, "
        "and the resume frame is guarded per layer.",
        "",
        ("peft/tuners/vblora/* in *: *", "* at peft/tuners/vblora/*: *"),
    ),
    "cartridge-class-per-call": (
        "Cartridge's embedding defines a class inside CartridgeEncoder.embedding (Dynamo: Invalid call to "
        "__build_class__), so every call sees a new type and the type guard fails.",
        "",
        ("peft/tuners/cartridge/* in *: *", "* at peft/tuners/cartridge/*: *"),
    ),
    "xlora-classifier": (
        "X-LoRA's classifier runs a scaling pass before the forward and freezes or switches adapters in Python "
        "(_pre_forward, _maybe_freeze_all_adapters): breaks there, and guards on the classifier's state.",
        "",
        ("peft/tuners/xlora/* in *: *", "* at peft/tuners/xlora/*: *"),
    ),
    "tuner-python-state": (
        "AdaLoRA's, BOFT's and Shadow's layers read Python-side state in forward (rank allocation, a __getattr__ "
        "fallback, a data-dependent branch), which Dynamo breaks on.",
        "",
        (
            "peft/tuners/adalora/* in *: *",
            "peft/tuners/boft/* in *: *",
            "peft/tuners/shadow/* in *: *",
            "* at peft/tuners/adalora/*: *",
            "* at peft/tuners/boft/*: *",
            "* at peft/tuners/shadow/*: *",
        ),
    ),
    "fsdp-hooks-skipped": (
        "FSDP2's hooks run eagerly (torch._dynamo.config.skip_fsdp_hooks): Dynamo meets a function marked as "
        "skipped in FSDP's wrapper and breaks there.",
        "",
        ("torch/distributed/fsdp/* in *: *",),
    ),
    "recompile-without-guard-failure": (
        "Dynamo recorded a recompile of a frame it names only by number, with no guard failure: the cache entry was "
        "dropped rather than failed (seen with several Cartridge adapters on one model).",
        "",
        ("frame *: (no guard failure recorded)",),
    ),
    "contextlib-frames": (
        "contextlib's helpers (a context manager's __init__ and helper) are compiled as frames of their own when "
        "called from a frame run eagerly, and guard on the generator function they wrap.",
        "",
        ("* at contextlib.py: *",),
    ),
}


def rewrite(path: Path) -> int:
    budgets = BudgetFile.load(path)
    budgets.causes = {name: Cause(name, note, patterns, link) for name, (note, link, patterns) in CAUSES.items()}
    for case_id, budget in list(budgets.entries.items()):
        note = stable(budget.note)
        if note.startswith(GENERATED_NOTE):
            note = DDP_NOTE if budget.ddp_splits else ""
        texts = {name: stable(getattr(budget, name)) for name in KNOWN_FAILURE_FIELDS}
        budget = dataclasses.replace(
            budget,
            note=note,
            **texts,
            break_signatures=tuple(sorted({normalize(s) for s in budget.break_signatures})),
            recompile_signatures=tuple(sorted({normalize(s) for s in budget.recompile_signatures})),
        )
        budgets.entries[case_id] = budget
    budgets.written, budgets.written_causes = {}, {}
    unexplained = budgets.unexplained()
    for case_id, signatures in sorted(unexplained.items()):
        print(f"no cause explains {case_id}: {signatures}", file=sys.stderr)
    budgets.write()
    kept = len(BudgetFile.load(path).entries)
    print(f"rewrote {path}: {kept} entries, {len(budgets.causes)} causes, {len(unexplained)} unexplained")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(rewrite(Path(sys.argv[1])))

"""Adapters put onto a model that is already compiled: the order users get wrong.

- ``inject-compiled``: ``add_adapter`` and ``load_adapter`` on a compiled PEFT model. PEFT promises these work: its
  loading code strips the compiled wrapper's ``_orig_mod.`` prefix (peft#2957, fixed in peft#2962) and hot-swapping
  supports compiled models. Asserted: each new adapter's compiled outputs equal an eager model with that adapter,
  what the compiled model compiles for it is audited, and switching back and forth again compiles nothing.
- ``inject-compiled-base``: ``get_peft_model`` on a compiled base model. PEFT accepts it without a word; the compiled
  outputs must equal eager's, and the adapter it saves must reload into a fresh base (no ``_orig_mod.`` key).
"""

from __future__ import annotations

import inspect

import peft
import pytest
import torch
from safetensors.torch import load_file

import bench_models
from bench_models import make_batch, model_inputs
from bench_models.lifecycle import randomize_adapter
from compile_audit.probe.parity import compare_tensors
from tests.test_save_load import ADAPTER_FILE, reload, saved_adapter_problems

ADDED, LOADED = "added", "loaded"


@torch.no_grad()
def _logits(model, batch) -> torch.Tensor:
    return model(**batch).logits.detach()


def _adapter_config(case):
    return bench_models.get_method(case.method).make_config(bench_models.get_spec(case.model))


@pytest.mark.scenario("inject-compiled")
def test_inject_into_compiled_peft_model(case, device, make_peft_model, case_audit, tmp_path):
    if not bench_models.get_method(case.method).supports("multi-adapter"):
        pytest.skip(f"PEFT does not support a second {case.method} adapter")
    tolerance = case.tolerance
    batch = make_batch(case.model, case.method, seq_len=8, device=device)
    # What load_adapter will load: an adapter trained elsewhere (seeded), saved the ordinary way.
    source = make_peft_model()
    randomize_adapter(source, "default", seed=12)
    source.save_pretrained(tmp_path / "saved")
    # The eager reference: the same model with the same adapters, never compiled.
    eager = make_peft_model().eval()
    model = make_peft_model().eval()

    compiled = case_audit.compile(model)
    with case_audit.phase("default-1", "eval"):
        _logits(compiled, batch)
    for target in (compiled, eager):
        torch.manual_seed(1)
        target.add_adapter(ADDED, _adapter_config(case))
        target.load_adapter(tmp_path / "saved", adapter_name=LOADED)
    randomize_adapter(model, ADDED, seed=11)
    randomize_adapter(eager, ADDED, seed=11)

    plan = [("default", 2), (ADDED, 1), (LOADED, 1), ("default", 3), (ADDED, 2), (LOADED, 2)]
    for adapter, round_ in plan:
        name = f"{adapter}-{round_}"
        compiled.set_adapter(adapter)
        eager.set_adapter(adapter)
        with case_audit.phase(name, "eval"):
            actual = _logits(compiled, batch)
        expected = _logits(eager, batch)
        case_audit.expect(
            compare_tensors(f"[{name}] compiled vs eager logits", expected, actual, **tolerance), check="parity"
        )
    case_audit.steady_state_after(f"{LOADED}-1")
    case_audit.expect(_inject_from_state_dict_problem(case, device, source), check="inject from state dict")
    eager.set_adapter("default")
    default_out = _logits(eager, batch)
    eager.set_adapter(LOADED)
    if torch.allclose(default_out, _logits(eager, batch)):
        case_audit.expect("the loaded adapter has no effect: this case's parity checks prove nothing")


def _inject_from_state_dict_problem(case, device, source) -> str | None:
    """peft#2957, fixed in peft#2962: ``inject_adapter_in_model(config, compiled, state_dict=...)``, PEFT's low-level
    API, must find each module the state dict names although a compiled model's modules sit under ``_orig_mod.``.
    Only the injection is checked: the compiled wrapper is never called, so nothing compiles outside the audit."""
    config = _adapter_config(case)
    if config.peft_type != peft.PeftType.LORA:
        return None  # the fix and its test are LoRA's: other tuners' state dicts name modules otherwise
    if "state_dict" not in inspect.signature(peft.inject_adapter_in_model).parameters:
        return None  # a PEFT before the low-level API took a state dict: nothing to check
    dtype = getattr(torch, case.dtype) if case.dtype else None
    base = bench_models.build_method_base(case.model, case.method, device=device, dtype=dtype, seed=0)
    prefix = "base_model.model."
    state = {key.removeprefix(prefix): value for key, value in peft.get_peft_model_state_dict(source).items()}
    wanted = {key.split(".lora_", 1)[0] for key in state if ".lora_" in key}
    try:
        injected = peft.inject_adapter_in_model(config, torch.compile(base), state_dict=state)
    except Exception as error:  # PEFT's own message says what it could not match
        return f"inject_adapter_in_model on a compiled model with a state dict raised (peft#2962): {error}"
    found = {name.removeprefix("_orig_mod.") for name, module in injected.named_modules() if hasattr(module, "lora_A")}
    missing = sorted(wanted - found)
    if not missing:
        return None
    return (
        f"inject_adapter_in_model on a compiled model with a state dict injected {len(wanted) - len(missing)} of the "
        f"{len(wanted)} module(s) it names (peft#2962): {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}"
    )


@pytest.mark.scenario("inject-compiled-base")
def test_get_peft_model_on_compiled_base(case, device, make_peft_model, case_audit, tmp_path):
    tolerance = case.tolerance
    batch = make_batch(case.model, case.method, seq_len=8, device=device)
    eager = make_peft_model()
    randomize_adapter(eager, "default", seed=10)
    eager.eval()
    expected = _logits(eager, batch)

    dtype = getattr(torch, case.dtype) if case.dtype else None
    base = bench_models.build_method_base(case.model, case.method, device=device, dtype=dtype, seed=0).eval()
    compiled_base = case_audit.compile(base)
    with case_audit.phase("base-1", "eval"):
        _logits(compiled_base, model_inputs(batch))
    torch.manual_seed(0)  # as make_peft_model seeds the adapter's init
    model = peft.get_peft_model(compiled_base, _adapter_config(case))
    randomize_adapter(model, "default", seed=10)
    model.eval()
    for round_ in (1, 2):
        name = f"adapter-{round_}"
        with case_audit.phase(name, "eval"):
            actual = _logits(model, batch)
        case_audit.expect(
            compare_tensors(f"[{name}] compiled-base PEFT model vs eager logits", expected, actual, **tolerance),
            check="parity",
        )
    case_audit.steady_state_after("adapter-1")

    model.save_pretrained(tmp_path / "saved")
    what = "adapter saved from get_peft_model(compiled base)"
    state = peft.get_peft_model_state_dict(eager)
    for problem in saved_adapter_problems(what, load_file(tmp_path / "saved" / ADAPTER_FILE), state):
        case_audit.expect(problem, check="saved adapter")
    reloaded = reload(case, device, tmp_path / "saved")
    case_audit.expect(
        compare_tensors(
            f"{what}, reloaded into a fresh base, vs eager", expected, _logits(reloaded, batch), **tolerance
        ),
        check="saved adapter",
    )

"""Scenario save-load: save_pretrained from a compiled PEFT model (once written an empty state dict, transformers#27397)
and from the PEFT model under it; each reloaded into a fresh base gives the compiled model's outputs; the saved
adapter holds every adapter tensor and no `_orig_mod.` key; compiling the reloaded model stays within budget."""

from __future__ import annotations

import peft
import pytest
import torch
from safetensors.torch import load_file

import bench_models
from bench_models import make_batch
from bench_models.lifecycle import randomize_adapter
from compile_audit.probe.parity import compare_tensors

ADAPTER_FILE = "adapter_model.safetensors"


@torch.no_grad()
def _logits(model, batch) -> torch.Tensor:
    return model(**batch).logits.detach()


def saved_adapter_problems(what: str, saved: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> list[str]:
    """The saved tensors against PEFT's own state dict of the adapter: missing, unexpected, compiled-wrapper keys,
    different values."""
    problems = []
    wrapped = sorted(k for k in saved if "_orig_mod." in k)
    if wrapped:
        problems.append(
            f"{what}: {len(wrapped)} key(s) carry the compiled wrapper's `_orig_mod.` prefix: {wrapped[:3]}"
        )
    missing, unexpected = sorted(expected.keys() - saved.keys()), sorted(saved.keys() - expected.keys())
    if missing:
        problems.append(f"{what}: {len(missing)} of {len(expected)} adapter tensor(s) not saved: {missing[:3]}")
    if unexpected and not wrapped:
        problems.append(f"{what}: {len(unexpected)} unexpected key(s): {unexpected[:3]}")
    differ = sorted(k for k in expected.keys() & saved.keys() if not torch.equal(saved[k].cpu(), expected[k].cpu()))
    if differ:
        problems.append(f"{what}: {len(differ)} saved tensor(s) differ from the model's: {differ[:3]}")
    return problems


def reload(case, device, folder):
    dtype = getattr(torch, case.dtype) if case.dtype else None
    base = bench_models.build_method_base(case.model, case.method, device=device, dtype=dtype, seed=0)
    return peft.PeftModel.from_pretrained(base, folder).eval()


@pytest.mark.scenario("save-load")
def test_save_load(case, device, make_peft_model, case_audit, tmp_path):
    model = make_peft_model()
    randomize_adapter(model, "default", seed=10)
    model.eval()
    batch = make_batch(case.model, case.method, seq_len=8, device=device)
    tolerance = case.tolerance

    # The model users save from: compiled and run (what train-eval-train audits), not audited here. Its compile is the
    # case's first: what runs from here on (saving, reloading) is no part of the build.
    compiled = case_audit.compile_unaudited(model, backend=case.backend, dynamic=case_audit.dynamic)
    expected = _logits(compiled, batch)
    state = {k: v.detach().clone() for k, v in peft.get_peft_model_state_dict(model).items()}
    folders = {"compiled": tmp_path / "from-compiled", "peft": tmp_path / "from-peft-model"}
    compiled.save_pretrained(folders["compiled"])
    model.save_pretrained(folders["peft"])

    reloaded = {}
    for source, folder in folders.items():
        what = f"adapter saved from the {source} model"
        if not (folder / ADAPTER_FILE).is_file():
            case_audit.expect(f"{what}: no {ADAPTER_FILE} in {sorted(p.name for p in folder.iterdir())}")
            continue
        for problem in saved_adapter_problems(what, load_file(folder / ADAPTER_FILE), state):
            case_audit.expect(problem)
        reloaded[source] = reload(case, device, folder)
        case_audit.expect(
            compare_tensors(
                f"{what}, reloaded (eager) vs the compiled model",
                expected,
                _logits(reloaded[source], batch),
                **tolerance,
            ),
            check="parity",
        )

    if "compiled" not in reloaded:
        return
    recompiled = case_audit.compile(reloaded["compiled"])
    for round_ in (1, 2):
        name = f"reloaded-{round_}"
        with case_audit.phase(name, "eval"):
            actual = _logits(recompiled, batch)
        case_audit.expect(
            compare_tensors(f"[{name}] compiled reloaded vs the compiled model", expected, actual, **tolerance),
            check="parity",
        )
    case_audit.steady_state_after("reloaded-1")

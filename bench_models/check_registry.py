"""Validate the registry eagerly: build each (model, method), run one train step and one eval step, then smoke-test
every operation the method claims.

    python -m bench_models.check_registry           # every method on llama-tiny, a few methods on the others
    python -m bench_models.check_registry --all     # the full tiny model x method product
    python -m bench_models.check_registry --no-ops  # skip the operation smoke tests
    python -m bench_models.check_registry --unclaimed  # also flag unclaimed operations that work
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
import warnings

import peft
import torch

from . import (
    CORE_METHODS,
    EXCLUDED_PEFT_TYPES,
    METHODS,
    MODELS,
    add_adapter,
    build_base_model,
    build_peft_model,
    eval_step,
    library_versions,
    make_batch,
    make_optimizer,
    operation_skip_reason,
    skip_reason,
    train_step,
)
from .models import auto_model_class

# float32 tiny models: "same" allows merge/recompute round-off, "different" needs a change one train step makes.
ATOL, RTOL = 1e-5, 1e-4


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=ATOL, rtol=RTOL)


def _differ(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape != b.shape or (a - b).abs().max().item() > ATOL


def _trained(model_key, method_name, **kwargs):
    model = build_peft_model(model_key, method_name, **kwargs)
    batch = make_batch(model_key, method_name)
    train_step(model, make_optimizer(model), batch)
    return model, batch


def _logits(model, batch, **kwargs) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(**batch, **kwargs).logits


def check_multi_adapter(model_key, method_name):
    model, batch = _trained(model_key, method_name)
    out_default = eval_step(model, batch)
    add_adapter(model, model_key, method_name, "other")
    model.set_adapter("other")
    # The fresh second adapter must differ from the trained first one.
    assert _differ(eval_step(model, batch), out_default), "the second adapter gives the same output as the first"
    train_step(model, make_optimizer(model), batch)
    model.set_adapter("default")
    assert _close(eval_step(model, batch), out_default), "switching back does not restore the first adapter"


def check_disable_adapter(model_key, method_name):
    model, batch = _trained(model_key, method_name)
    out = eval_step(model, batch)
    with model.disable_adapter():
        out_disabled = eval_step(model, batch)
    reference = eval_step(build_base_model(model_key), batch)
    assert _close(out_disabled, reference), "disabled output differs from the base model"
    assert _differ(out, reference), "the trained adapter does not change the output"


def check_merge_unmerge(model_key, method_name):
    model, batch = _trained(model_key, method_name)
    out = eval_step(model, batch)
    model.merge_adapter()
    assert _close(eval_step(model, batch), out), "merged output differs"
    model.unmerge_adapter()
    assert _close(eval_step(model, batch), out), "unmerged output differs"


def check_mixed_batch(model_key, method_name):
    model, batch = _trained(model_key, method_name)
    add_adapter(model, model_key, method_name, "other")
    model.set_adapter("other")
    out_other = eval_step(model, batch)  # fresh adapter; for identity-init methods this is the base output
    model.set_adapter("default")
    out_default = eval_step(model, batch)
    assert _differ(out_other[1], out_default[1]), "the two adapters agree, the check would prove nothing"
    mixed = _logits(model, batch, adapter_names=["default", "other"])
    assert _close(mixed[0], out_default[0]) and _close(mixed[1], out_other[1]), "per-row adapters not applied"


def check_hotswap(model_key, method_name):
    from peft.utils.hotswap import hotswap_adapter, prepare_model_for_compiled_hotswap

    donor, batch = _trained(model_key, method_name, rank=4)
    expected = eval_step(donor, batch)
    model = build_peft_model(model_key, method_name, rank=8)
    prepare_model_for_compiled_hotswap(model, target_rank=8)
    with tempfile.TemporaryDirectory() as tmp:
        donor.save_pretrained(tmp)
        hotswap_adapter(model, tmp, adapter_name="default", torch_device="cpu")
    assert _close(eval_step(model, batch), expected), "hot-swapped model does not reproduce the donor adapter"


def check_gradient_checkpointing(model_key, method_name):
    batch = make_batch(model_key, method_name)
    grads = []
    for checkpointing in (False, True):
        model = build_peft_model(model_key, method_name, dropout=0.0)
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            assert model.is_gradient_checkpointing
        model(**batch).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.requires_grad})
    plain, ckpt = grads
    assert any(g is not None and g.abs().sum() > 0 for g in ckpt.values()), "no gradient with checkpointing"
    for name, grad in plain.items():
        assert (grad is None) == (ckpt[name] is None), f"{name}: grad presence differs"
        assert grad is None or _close(grad, ckpt[name]), f"{name}: grad differs with checkpointing"


def check_generate(model_key, method_name):
    model = build_peft_model(model_key, method_name).eval()
    batch = make_batch(model_key, method_name)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert out.shape == (batch["input_ids"].shape[0], batch["input_ids"].shape[1] + 3), f"shape {tuple(out.shape)}"


OPERATION_CHECKS = {
    "multi-adapter": check_multi_adapter,
    "disable-adapter": check_disable_adapter,
    "merge-unmerge": check_merge_unmerge,
    "mixed-batch": check_mixed_batch,
    "hotswap": check_hotswap,
    "gradient-checkpointing": check_gradient_checkpointing,
    "generate": check_generate,
}


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")


def run_case(model_key: str, method_name: str, verbose: bool) -> tuple[str, float, str]:
    reason = skip_reason(model_key, method_name)
    if reason:
        return "skip", 0.0, reason
    start = time.perf_counter()
    try:
        model = build_peft_model(model_key, method_name)
        batch = make_batch(model_key, method_name)
        loss = train_step(model, make_optimizer(model), batch)
        logits = eval_step(model, batch)
        assert torch.isfinite(loss) and torch.isfinite(logits).all(), "non-finite loss or logits"
        assert not model.training, "eval_step left the model in train mode"
    except Exception as exc:
        if verbose:
            traceback.print_exc()
        return "error", time.perf_counter() - start, _error(exc)
    return "ok", time.perf_counter() - start, ""


def run_operations(model_key: str, method_name: str, verbose: bool, unclaimed: bool = False):
    """Run the check of every operation claimed for (model, method); with `unclaimed`, also the unclaimed ones,
    reporting those that pass (the registry is stale, e.g. after a PEFT upgrade)."""
    passed, failed, stale = [], [], []
    start = time.perf_counter()
    for op, check in OPERATION_CHECKS.items():
        claimed = operation_skip_reason(model_key, method_name, op) is None
        if not claimed and not unclaimed:
            continue
        try:
            check(model_key, method_name)
        except Exception as exc:
            if claimed:
                if verbose:
                    traceback.print_exc()
                failed.append(f"{op} ({_error(exc)[:160]})")
            continue
        (passed if claimed else stale).append(op)
    return passed, failed, stale, time.perf_counter() - start


def check_peft_type_coverage() -> list[str]:
    covered = {m.peft_type for m in METHODS.values()}
    names = set(peft.PeftType.__members__)
    problems = [
        f"{name}: needs exactly one of a method or an exclusion"
        for name in names
        if (name in covered) == (name in EXCLUDED_PEFT_TYPES)
    ]
    problems += [f"{name}: not a PeftType" for name in (covered | set(EXCLUDED_PEFT_TYPES)) - names]
    return problems


def check_full_size_configs() -> list[str]:
    """Full-size configs load, and a meta-device model has the parameter count of the model card."""
    problems = []
    for spec in MODELS.values():
        if not spec.full_size:
            continue
        try:
            with torch.device("meta"):
                model = auto_model_class(spec).from_config(spec.hf_config())
            billions = sum(p.numel() for p in model.parameters()) / 1e9
            expected = spec.published_config()["_params_billion"]
            if abs(billions - expected) >= 0.01:  # model cards round or truncate to 0.01B
                problems.append(f"{spec.key}: {billions:.3f}B parameters, model card says {expected}B")
        except Exception as exc:
            problems.append(f"{spec.key}: {_error(exc)}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--all", action="store_true", help="the full tiny model x method product")
    parser.add_argument("--no-ops", action="store_true", help="skip the operation smoke tests")
    parser.add_argument(
        "--unclaimed", action="store_true", help="also try unclaimed operations and flag those that work"
    )
    parser.add_argument("--models", nargs="*", help="only these models")
    parser.add_argument("--methods", nargs="*", help="only these methods")
    parser.add_argument("-v", "--verbose", action="store_true", help="print tracebacks")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(2)

    tiny = [k for k, s in MODELS.items() if s.cpu_matrix]
    cases = []
    for model_key in args.models or tiny:
        for method_name in args.methods or METHODS:
            if args.all or args.methods or model_key == "llama-tiny" or method_name in CORE_METHODS:
                cases.append((model_key, method_name))

    print(" ".join(f"{k}={v}" for k, v in library_versions().items()))
    header = f"{'model':<11} {'method':<29} {'status':<6} {'secs':>6}  {'ops ok / failed (secs)'}"
    print(header)
    print("-" * len(header))
    counts = {"ok": 0, "skip": 0, "error": 0}
    op_failures = 0
    start = time.perf_counter()
    for model_key, method_name in cases:
        status, secs, detail = run_case(model_key, method_name, args.verbose)
        counts[status] += 1
        line = f"{model_key:<11} {method_name:<29} {status:<6} {secs:6.2f}  "
        if status == "ok" and not args.no_ops:
            passed, failed, stale, op_secs = run_operations(model_key, method_name, args.verbose, args.unclaimed)
            op_failures += len(failed) + len(stale)
            line += f"{len(passed)} ok" + (f", FAILED: {'; '.join(failed)}" if failed else "")
            line += (f", UNCLAIMED BUT WORKS: {', '.join(stale)}" if stale else "") + f" ({op_secs:.1f}s)"
        else:
            line += detail[:200]
        print(line, flush=True)

    problems = check_peft_type_coverage() + check_full_size_configs()
    for problem in problems:
        print("PROBLEM:", problem)
    print(
        f"\n{counts['ok']} ok, {counts['skip']} skipped, {counts['error']} errors, {op_failures} operation failures, "
        f"{len(problems)} registry problems in {time.perf_counter() - start:.0f}s"
    )
    return int(bool(counts["error"] or op_failures or problems))


if __name__ == "__main__":
    sys.exit(main())

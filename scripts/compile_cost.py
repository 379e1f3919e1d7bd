"""What the first compiled train step of one case costs, split into Dynamo, AOTAutograd and the backend, for each
compile variant: whole model or each repeated block (regional), with or without the KV cache in training.

    python scripts/compile_cost.py --model llama-3.2-1b --method lora --backend aot_eager --dtype bfloat16 \
        [--variants whole,whole-no-cache,regional] [--seq-len 64] [--output results/<date>-cpu/compile-cost.md]

The model is built once; each variant starts from a reset Dynamo and compiles it anew (the weights it trained are
the previous variant's: compile cost does not depend on them). Every variant compiles with ``dynamic=True``, the GPU
tier's policy. Per variant: one train step (the compile), then one eval step (the train -> eval recompile). The
figures are this machine's: they size the GPU stages (results/README.md), they are never a pass/fail.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

import bench_models
from compile_audit.probe.compile_cost import CompileCostWatch
from compile_audit.probe.recompiles import PhaseAudit


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    regional: bool
    use_cache: bool  # the model's KV cache in training steps (transformers' default is on)
    meaning: str
    dynamo: dict[str, Any] = dataclasses.field(default_factory=dict)


VARIANTS = {
    v.name: v
    for v in (
        Variant("whole", False, True, "the whole model, transformers' defaults (the seed's reference)"),
        Variant("whole-no-cache", False, False, "the whole model, use_cache off in training"),
        Variant("regional", True, False, "each decoder layer compiled once, use_cache off in training"),
        Variant(
            "regional-cached", True, True, "each decoder layer, the KV cache on: each layer's cache slot is a guard"
        ),
        Variant(
            "whole-float-specialized",
            False,
            False,
            "the whole model, use_cache off, Python floats specialized (no tensorify restart)",
            {"specialize_float": True},
        ),
        Variant(
            "regional-float-specialized",
            True,
            False,
            "regional, Python floats specialized (no tensorify restart)",
            {"specialize_float": True},
        ),
    )
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help=f"one of: {', '.join(bench_models.MODELS)}")
    parser.add_argument("--method", default="lora", help="a PEFT method of the zoo (default: lora)")
    parser.add_argument("--backend", default="aot_eager", help="torch.compile backend (default: aot_eager)")
    parser.add_argument("--device", default="cpu", help="where the model is built and run (default: cpu)")
    parser.add_argument("--dtype", default=None, help="a torch dtype name the model is built in (e.g. bfloat16)")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument(
        "--variants",
        default="whole,regional",
        help=f"comma-separated, of: {', '.join(VARIANTS)} (default: %(default)s)",
    )
    parser.add_argument("--output", type=Path, default=None, help="a Markdown table (and .json beside it)")
    args = parser.parse_args(argv)
    if args.model not in bench_models.MODELS:
        parser.error(f"--model: unknown model {args.model!r}; valid: {', '.join(bench_models.MODELS)}")
    unknown = [name for name in args.variants.split(",") if name not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown}; valid: {', '.join(VARIANTS)}")
    if args.dtype is not None and not isinstance(getattr(torch, args.dtype, None), torch.dtype):
        parser.error(f"--dtype: torch has no dtype {args.dtype!r}")
    return args


def measure(model, variant: Variant, args: argparse.Namespace) -> dict[str, Any]:
    torch._dynamo.reset()
    bench_models.set_kv_cache(model, on=variant.use_cache)
    batch = bench_models.make_batch(
        args.model, args.method, batch_size=args.batch_size, seq_len=args.seq_len, device=args.device
    )
    optimizer = bench_models.make_optimizer(model)
    with torch._dynamo.config.patch(**variant.dynamo):
        audit = PhaseAudit(backend=args.backend, dynamic=True, regional=variant.regional)
        compiled = audit.compile(model)
        started = time.perf_counter()
        with CompileCostWatch() as train_cost, audit.phase("first-step", "train") as first:
            bench_models.train_step(compiled, optimizer, batch)
        train_wall = time.perf_counter() - started
        started = time.perf_counter()
        with CompileCostWatch() as eval_cost, audit.phase("eval", "eval"):
            bench_models.eval_step(compiled, batch)
        eval_wall = time.perf_counter() - started
    if variant.regional:  # back to an uncompiled model for the next variant
        for module in model.modules():
            module._compiled_call_impl = None
    return {
        "variant": variant.name,
        "meaning": variant.meaning,
        "first_step_wall_s": round(train_wall, 1),
        **train_cost.cost.to_dict("first_step_"),
        "first_step_graph_breaks": len(first.graph_breaks),
        "first_step_recompiles": len(first.recompiles),
        "eval_wall_s": round(eval_wall, 1),
        **eval_cost.cost.to_dict("eval_"),
    }


def _eager_step_seconds(model, args: argparse.Namespace) -> float:
    bench_models.set_kv_cache(model, on=False)
    batch = bench_models.make_batch(
        args.model, args.method, batch_size=args.batch_size, seq_len=args.seq_len, device=args.device
    )
    started = time.perf_counter()
    bench_models.train_step(model, bench_models.make_optimizer(model), batch)
    return time.perf_counter() - started


def table(rows: list[dict[str, Any]], header: str) -> str:
    lines = [
        header,
        "",
        "| variant | first step (s) | Dynamo (s) | AOTAutograd (s) | backend (s) | attempts | restarts (s lost) |"
        " recompiles | breaks | eval step (s) | eval Dynamo + AOT (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        restarts = f"{len(r['first_step_restarts'])} ({r['first_step_restart_s']})"
        eval_compile = round(r["eval_dynamo_s"] + r["eval_aot_autograd_s"], 1)
        lines.append(
            f"| {r['variant']} | {r['first_step_wall_s']} | {r['first_step_dynamo_s']:.1f} |"
            f" {r['first_step_aot_autograd_s']:.1f} | {r['first_step_backend_s']:.1f} |"
            f" {r['first_step_compile_attempts']} | {restarts} | {r['first_step_recompiles']} |"
            f" {r['first_step_graph_breaks']} | {r['eval_wall_s']} | {eval_compile} |"
        )
    lines += ["", *(f"- `{r['variant']}`: {r['meaning']}" for r in rows)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dtype = getattr(torch, args.dtype) if args.dtype else None
    started = time.perf_counter()
    model = bench_models.build_peft_model(args.model, args.method, device=args.device, dtype=dtype)
    build_s = time.perf_counter() - started
    print(f"built {args.model} + {args.method} in {build_s:.0f} s", flush=True)
    eager_s = _eager_step_seconds(model, args)  # what a step costs without compiling: the rest of a first step
    print(f"one eager train step: {eager_s:.1f} s", flush=True)
    rows = []
    for name in args.variants.split(","):
        rows.append(measure(model, VARIANTS[name], args))
        print(json.dumps(rows[-1]), flush=True)
    versions = bench_models.library_versions()
    header = (
        f"{args.model} + {args.method} on {args.device}, {args.backend}, dynamic=True,"
        f" batch {args.batch_size} x {args.seq_len} tokens,"
        f" dtype {args.dtype or 'the model default'}; model built in {build_s:.0f} s; torch {versions['torch']},"
        f" transformers {versions['transformers']}, peft {versions['peft']}, {torch.get_num_threads()} threads;"
        f" one eager train step {eager_s:.1f} s"
    )
    text = table(rows, header)
    print(text)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
        args.output.with_suffix(".json").write_text(
            json.dumps(
                {"header": header, "build_s": round(build_s, 1), "eager_step_s": round(eager_s, 1), "rows": rows},
                indent=1,
            )
            + "\n",
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

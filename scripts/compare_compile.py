"""What compiling buys for one case, as the MetaMathQA table: no compile vs compile with and without the
train/eval switch.

    python scripts/compare_compile.py --model llama-3.2-1b --method lora --steps 20 --batch-size 4 --seq-len 512 \
        [--device cuda] [--backend inductor] [--eval-every 5] [--output table.md]

Three runs with the same seeds and batches:
  no compile                    eager training; validation in eval mode under no_grad
  compile w/ train/eval switch  validation: model.eval() + no_grad, then back to model.train()
  compile w/o switch            validation in train mode under no_grad (dropout stays on)
and with --regional a fourth, the second with each decoder layer compiled once instead of the whole model
(compile_audit.probe.regions). Every run trains with the model's use_cache off (a training step needs no KV cache).
A validation step runs every ``--eval-every`` train steps. Memory is sampled after every step (train and
validation) with the peak statistics reset before it; on CPU the memory rows read "n/a (CPU)".
Figures are measurements on this machine, never a pass/fail.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

import bench_models
from compile_audit.probe.compile_cache import CacheWatch
from compile_audit.probe.memory import MemorySampler, ProcessPeak, format_bytes, release_memory
from compile_audit.probe.recompiles import PhaseAudit
from compile_audit.probe.timing import StepTimer

RUNS = (
    ("no compile", None),
    ("compile w/ train/eval switch", True),
    ("compile w/o switch", False),
)
REGIONAL_RUN = ("regional compile w/ switch", True)  # --regional: each decoder layer compiled once
EVAL_SEED = 10_000
CPU_NA = "n/a (CPU)"


def positive(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--model", required=True, help=f"one of: {', '.join(bench_models.MODELS)}")
    parser.add_argument("--method", required=True, help="a PEFT method of the zoo (e.g. lora, lora-dora, ia3)")
    parser.add_argument("--steps", type=positive(1), default=20, help="train steps per run (>= 1)")
    parser.add_argument("--batch-size", type=positive(1), default=4)
    parser.add_argument(
        "--seq-len", type=positive(2), default=None, help="tokens per row (default: 512 full-size, 64 tiny models)"
    )
    parser.add_argument("--eval-every", type=positive(1), default=5, help="a validation step every K train steps")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu, cuda, cuda:N")
    parser.add_argument(
        "--backend", default=None, help="torch.compile backend (default: inductor on CUDA, aot_eager on CPU)"
    )
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default=None, help="default: bf16 on CUDA, fp32 on CPU")
    parser.add_argument("--output", type=Path, help="also write the markdown table to this file")
    parser.add_argument("--regional", action="store_true", help="a fourth run: each repeated block compiled once")
    args = parser.parse_args(argv)

    if args.model not in bench_models.MODELS:
        parser.error(f"--model: unknown model {args.model!r}; valid models: {', '.join(bench_models.MODELS)}")
    if args.method not in bench_models.METHODS:
        parser.error(f"--method: unknown method {args.method!r}; valid methods: {', '.join(bench_models.METHODS)}")
    reason = bench_models.skip_reason(args.model, args.method)
    if reason:
        parser.error(f"--method {args.method} cannot run on --model {args.model}: {reason}")
    try:
        device = torch.device(args.device)
    except RuntimeError as error:
        parser.error(f"--device: {error}")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            parser.error("--device cuda: CUDA is not available on this machine (use --device cpu)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            parser.error(f"--device {args.device}: only {torch.cuda.device_count()} CUDA device(s)")
        device = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
    args.device = str(device)
    args.backend = args.backend or ("inductor" if device.type == "cuda" else "aot_eager")
    known = torch._dynamo.list_backends(exclude_tags=())
    if args.backend not in known:
        parser.error(f"--backend: unknown backend {args.backend!r}; available: {', '.join(sorted(known))}")
    spec = bench_models.get_spec(args.model)
    args.seq_len = args.seq_len or (512 if spec.full_size else 64)
    max_positions = spec.config_dict().get("max_position_embeddings")
    if max_positions and args.seq_len > max_positions:
        parser.error(f"--seq-len {args.seq_len} exceeds {args.model}'s max_position_embeddings ({max_positions})")
    args.dtype = args.dtype or ("bf16" if device.type == "cuda" else "fp32")
    return args


def validate(model, batch, switch: bool | None) -> None:
    """One validation forward: with the switch (and eagerly) in eval mode, without it in train mode."""
    if switch is not False:
        model.eval()
    with torch.no_grad():
        model(**batch)
    model.train()


def run(args: argparse.Namespace, switch: bool | None, regional: bool = False) -> dict:
    """One run: None = no compile; True/False = compiled with/without the train/eval switch; ``regional``: each
    repeated block compiled instead of the whole model."""
    with ProcessPeak() as peak:
        result = _run(args, switch, regional)
    result["process_peak"] = peak.peak
    return result


def _run(args: argparse.Namespace, switch: bool | None, regional: bool) -> dict:
    device = args.device
    dtype = torch.bfloat16 if args.dtype == "bf16" else None
    model = bench_models.set_kv_cache(
        bench_models.build_peft_model(args.model, args.method, device=device, dtype=dtype), on=False
    )
    optimizer = bench_models.make_optimizer(model)
    audit = None
    if switch is not None:
        torch._dynamo.reset()
        audit = PhaseAudit(backend=args.backend, regional=regional)
        model = audit.compile(model, dynamic=True)
    timer, memory = StepTimer(device), MemorySampler(device)
    eval_batch = bench_models.make_batch(
        args.model, args.method, batch_size=args.batch_size, seq_len=args.seq_len, seed=EVAL_SEED, device=device
    )
    first_step_compile, first_step_cache = 0.0, "-"
    loss = None
    for step in range(args.steps):
        batch = bench_models.make_batch(
            args.model, args.method, batch_size=args.batch_size, seq_len=args.seq_len, seed=step, device=device
        )
        torch.manual_seed(step)
        memory.before_step()
        if audit is None:
            loss = timer.time(bench_models.train_step, model, optimizer, batch)
        else:
            with CacheWatch() as cache, audit.phase(f"train-{step}", "train") as record:
                loss = timer.time(bench_models.train_step, model, optimizer, batch)
            if step == 0:
                first_step_compile, first_step_cache = record.compile_seconds, cache.state
        memory.after_step()
        if (step + 1) % args.eval_every == 0 and step + 1 < args.steps:
            memory.before_step()
            if audit is None:
                validate(model, eval_batch, switch)
            else:
                with audit.phase(f"eval-{step}", "eval" if switch else "train-no-grad"):
                    validate(model, eval_batch, switch)
            memory.after_step()
    steady = timer.samples[1:] or timer.samples  # the first step compiles (and warms up eager)
    result = {
        "memory": memory.summary(),
        "compiles": 0 if audit is None else sum(p.frames_compiled for p in audit.phases),
        "step_seconds": statistics.median(steady),
        "first_step_compile": None if audit is None else first_step_compile,
        "first_step_cache": first_step_cache,
        "limit_hits": 0 if audit is None else len(audit.limit_hits),
        "final_loss": float(loss),
    }
    del model, optimizer
    release_memory(device)
    return result


def table(args: argparse.Namespace, results: list[dict]) -> str:
    def memory_row(label: str, field: str) -> list[str]:
        return [label] + [format_bytes(getattr(r["memory"], field), CPU_NA) if r["memory"] else CPU_NA for r in results]

    rows = [
        ["metric", *(name for name, _ in runs_of(args))],
        memory_row("reserved mem max", "reserved_max"),
        memory_row("reserved mem avg", "reserved_mean"),
        memory_row("reserved mem 99th", "reserved_p99"),
        memory_row("allocated mem max", "allocated_max"),
        ["process peak RSS", *(format_bytes(r["process_peak"], "n/a") for r in results)],
        ["number of compiles", *(str(r["compiles"]) for r in results)],
        ["recompile-limit hits (frames run eagerly)", *(str(r["limit_hits"]) for r in results)],
        ["train time / step (median)", *(f"{r['step_seconds'] * 1000:.1f} ms" for r in results)],
        [
            "first-step compile time",
            *("-" if r["first_step_compile"] is None else f"{r['first_step_compile']:.1f} s" for r in results),
        ],
        ["inductor cache at the first step", *(r["first_step_cache"] for r in results)],
        ["final train loss", *(f"{r['final_loss']:.5f}" for r in results)],
    ]
    versions = bench_models.library_versions()
    device = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "CPU"
    lines = [
        f"**{args.model} / {args.method}**: {args.steps} steps, batch {args.batch_size} x {args.seq_len} tokens, "
        f"validation every {args.eval_every} steps, {args.dtype}, backend `{args.backend}` (dynamic=True), "
        f"{device}; torch {versions['torch']}, transformers {versions['transformers']}, peft {versions['peft']}",
        "",
        "| " + " | ".join(rows[0]) + " |",
        "| " + " | ".join(["---"] * len(rows[0])) + " |",
        *("| " + " | ".join(row) + " |" for row in rows[1:]),
    ]
    return "\n".join(lines) + "\n"


def runs_of(args: argparse.Namespace) -> tuple[tuple[str, bool | None], ...]:
    return (*RUNS, REGIONAL_RUN) if args.regional else RUNS


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = []
    for name, switch in runs_of(args):
        print(f"[compare_compile] {name} ...", file=sys.stderr, flush=True)
        results.append(run(args, switch, regional=(name, switch) == REGIONAL_RUN))
    text = table(args, results)
    print(text, end="")
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# The GPU tier's check, in stages that each fit one device call; results/README.md has the device plan.
#
#   scripts/gpu_check.sh OUTDIR [--cpu] [--stage STAGE] [--only MODEL/METHOD[,MODEL/METHOD...]] [--record-budgets]
#
# STAGE (default all):
#   gate    the train-eval-train cases of the slice (breaks, recompiles, parity) with the GPU tier's inductor
#   bench   the step benchmarks of the slice: eager vs compiled step time, compile time, memory; the session's
#           compile artifacts saved to compile-artifacts.bin (WARM_FROM=<an earlier run's file> starts it warm)
#   regional the step benchmark of LoRA on Llama-3.2-1B (or --only's) with each decoder layer compiled once
#   cost    scripts/compile_cost.py: the first train step's compile of LoRA on Llama-3.2-1B split into Dynamo,
#           AOTAutograd and the backend, whole and regional (--cpu: llama-small, aot_eager)
#   table   scripts/compare_compile.py: no compile vs compile with / without the train/eval switch (and regional)
#   later   DoRA and LoHa (recompile-limit known failures on CPU) on llama-tiny and Llama-3.2-1B, gate and benchmarks
#   all     gate, bench, table
# or several, comma-separated (--stage bench,table), run in that order.
# Slice: LoRA, IA3 and prompt tuning on llama-tiny, LoRA on Llama-3.2-1B. --cpu: the same stages on CPU for LoRA on
# llama-tiny with inductor, so that this script's code path runs on every change (.ci/run, from a bare copy).
# --only: these model/method pairs instead of the slice (and of `later`'s), e.g. --only llama-3.2-1b/lora.
# --record-budgets: the cases run against a copy of the budgets file in OUTDIR, which --update-budgets rewrites
# (first contact: no @cuda-inductor budgets exist yet). Over-budget counts then do not fail; parity, a crash, a
# steady-state recompile and Dynamo's recompile limit still do, and known failures stay known failures.
#
# Works from a bare copy of the tree: nothing of this project installed (conftest.py loads the gate plugin), no
# .git (set GIT_COMMIT), no network. A compile smoke test runs first and stops the run in seconds when the backend
# cannot compile. Every file lands in OUTDIR as it is made; pytest runs under `timeout -s INT` (STAGE_TIMEOUT
# seconds, default 420) so that its report and benchmark JSON are written even when time runs out.
# Files: environment.txt (versions, GPU, smoke test), timings.txt, and per stage: pytest-STAGE.txt,
# report-STAGE.json, benchmarks.json and compile-artifacts.bin (bench), benchmarks-regional.json (regional),
# compile-cost.md/.json/.txt (cost), compile_budgets.toml (--record-budgets), table.md and table.txt.
# Exit status: 0 when every stage passed, else the first failing stage's; 3 when the smoke test fails.
set -uo pipefail

usage() {
    echo "usage: $0 OUTDIR [--cpu] [--stage gate|bench|regional|cost|table|later|all|STAGE,STAGE...]" \
        "[--only MODEL/METHOD[,...]] [--record-budgets]" >&2
    exit 2
}
[[ $# -ge 1 ]] || usage
OUTDIR=$1; shift
CPU=0 STAGE=all RECORD=0 ONLY=""
while [[ $# -gt 0 ]]; do
    case $1 in
        --cpu) CPU=1 ;;
        --stage) [[ $# -ge 2 ]] || usage; STAGE=$2; shift ;;
        --only) [[ $# -ge 2 && $2 == */* ]] || usage; ONLY=$2; shift ;;
        --record-budgets) RECORD=1 ;;
        *) usage ;;
    esac
    shift
done
[[ $STAGE == all ]] && STAGE=gate,bench,table
IFS=, read -r -a STAGES <<<"$STAGE"
for stage in "${STAGES[@]}"; do case $stage in gate | bench | regional | cost | table | later) ;; *) usage ;; esac; done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
mkdir -p "$OUTDIR" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
if [[ -z ${PYTHON:-} ]]; then PYTHON=$(command -v python3 || command -v python); fi
STAGE_TIMEOUT=${STAGE_TIMEOUT:-420}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

# -k "llama-tiny/lora/ or ..." (a bare "lora/" would also match adalora/, glora/, ...)
k_of() { local k="" id; for id in "$@"; do k+="${k:+ or }$id/"; done; echo "$k"; }
if [[ $CPU -eq 1 ]]; then
    DEVICE=cpu
    # The code path, not the coverage: `pytest --cpu-backend inductor -m inductor` judges the inductor selection.
    SLICE=(llama-tiny/lora)
    LATER=(llama-tiny/lora-dora llama-tiny/loha)
    GATE_ARGS=(-m "not selftest" --cpu-backend inductor)
    BENCH_ARGS=(-m "not selftest" --gpu-tier-device cpu --gpu-bench-rounds 2 --gpu-bench-warmup 1 --gpu-bench-seq-len 16)
    TABLE_ARGS=(--model llama-tiny --method lora --steps 4 --batch-size 2 --seq-len 32 --eval-every 2
                --device cpu --backend inductor)
    COST_ARGS=(--model llama-small --method lora --device cpu --backend aot_eager --seq-len 16)
    REGIONAL_SLICE=(llama-small/lora)
else
    DEVICE=cuda
    SLICE=(llama-tiny/lora llama-tiny/ia3 llama-tiny/prompt-tuning llama-3.2-1b/lora)
    LATER=(llama-tiny/lora-dora llama-tiny/loha llama-3.2-1b/lora-dora llama-3.2-1b/loha)
    GATE_ARGS=(-m gpu)
    BENCH_ARGS=(-m gpu --gpu-bench-rounds 5 --gpu-bench-warmup 2 --gpu-bench-seq-len 256)
    TABLE_ARGS=(--model llama-3.2-1b --method lora --steps 6 --batch-size 4 --seq-len 256 --eval-every 3
                --device cuda --backend inductor --regional)
    COST_ARGS=(--model llama-3.2-1b --method lora --device cuda --backend inductor --dtype bfloat16 --seq-len 256)
    REGIONAL_SLICE=(llama-3.2-1b/lora)
fi
# The bench stage saves its compile artifacts beside its results; WARM_FROM=<an earlier run's file> starts it warm.
ARTIFACT_ARGS=(--save-compile-artifacts "$OUTDIR/compile-artifacts.bin")
if [[ -n ${WARM_FROM:-} ]]; then ARTIFACT_ARGS+=(--load-compile-artifacts "$WARM_FROM"); fi

if [[ -n $ONLY ]]; then
    IFS=, read -r -a SLICE <<<"$ONLY"
    LATER=("${SLICE[@]}")
    REGIONAL_SLICE=("${SLICE[@]}")
fi

commit() {
    local sha
    if sha=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null); then
        echo "$sha$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (uncommitted changes)')"
    else
        echo "${GIT_COMMIT:-unknown (no .git here and GIT_COMMIT not set)}"
    fi
}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(hostname)"
    echo "mode: $([[ $CPU -eq 1 ]] && echo cpu || echo gpu), stage: $STAGE, record budgets: $RECORD"
    echo "commit: $(commit)"
    echo "python executable: $PYTHON"
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu: /'
    else
        echo "gpu: none (nvidia-smi not found)"
    fi
    "$PYTHON" - <<'EOF'
import importlib.metadata as metadata
import os
import platform

import torch

print(f"python: {platform.python_version()}")
print(f"torch: {torch.__version__} (cuda {torch.version.cuda}, available: {torch.cuda.is_available()})")
for name in ("transformers", "peft", "accelerate", "triton", "pytest", "pytest-benchmark", "pytest-xdist"):
    try:
        print(f"{name}: {metadata.version(name)}")
    except metadata.PackageNotFoundError:
        print(f"{name}: not installed")
gate = [e for e in metadata.entry_points(group="pytest11") if e.name == "compile_gate"]
print(f"compile gate plugin: {'installed entry point' if gate else 'loaded by conftest.py (not installed)'}")
print(f"inductor cache dir: {os.environ.get('TORCHINDUCTOR_CACHE_DIR', '(default)')}")
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        print(f"torch device {i}: {torch.cuda.get_device_name(i)}")
EOF
} >"$OUTDIR/environment.txt" 2>&1
cat "$OUTDIR/environment.txt"

: >>"$OUTDIR/timings.txt"
section() { echo "$1: $(($(date +%s) - $2)) s" | tee -a "$OUTDIR/timings.txt"; }

# The compile smoke test: inductor (and Triton, on CUDA) compile a forward and backward and match eager.
t=$(date +%s)
DEVICE=$DEVICE timeout -s INT -k 10 180 "$PYTHON" - >>"$OUTDIR/environment.txt" 2>&1 <<'EOF'
import os

import torch

device = os.environ["DEVICE"]
x = torch.randn(64, 32, device=device, requires_grad=True)
weight = torch.randn(32, 16, device=device)


def step(x):
    return torch.nn.functional.gelu(x @ weight).sum()


compiled = torch.compile(step, backend="inductor")
eager_grad = torch.autograd.grad(step(x), x)[0]
compiled_grad = torch.autograd.grad(compiled(x), x)[0]
torch.testing.assert_close(compiled_grad, eager_grad, rtol=1e-3, atol=1e-3)
print(f"smoke test: inductor compiled a forward and backward on {device} and matched eager")
EOF
smoke=$?
section "smoke test" "$t"
if [[ $smoke -ne 0 ]]; then
    echo "smoke test FAILED (exit $smoke): inductor cannot compile on $DEVICE here; see $OUTDIR/environment.txt" >&2
    tail -20 "$OUTDIR/environment.txt" >&2
    exit 3
fi

BUDGET_ARGS=()
if [[ $RECORD -eq 1 ]]; then
    BUDGET_ARGS=(--record-budgets="$OUTDIR/compile_budgets.toml")
fi

# run_pytest NAME K ARGS...: one pytest session under the stage timeout; its report is written even on timeout.
run_pytest() {
    local name=$1 k=$2; shift 2
    local t; t=$(date +%s)
    timeout -s INT -k 60 "$STAGE_TIMEOUT" "$PYTHON" -m pytest "$@" -k "$k" -p no:cacheprovider -q -rA \
        "${BUDGET_ARGS[@]}" --compile-report "$OUTDIR/report-$name.json" 2>&1 | tee "$OUTDIR/pytest-$name.txt"
    local status=${PIPESTATUS[0]}
    section "pytest $name (exit $status)" "$t"
    return "$status"
}

gate() { run_pytest gate "$(k_of "${SLICE[@]}")" tests/test_train_eval_train.py "${GATE_ARGS[@]}"; }
bench() {
    run_pytest bench "$(k_of "${SLICE[@]}")" tests/test_gpu_benchmarks.py "${BENCH_ARGS[@]}" \
        --benchmark-json "$OUTDIR/benchmarks.json" "${ARTIFACT_ARGS[@]}"
}
# The step benchmark again, each decoder layer compiled once instead of the whole model (the seed's table's third
# column); its figures carry compile_scope = regional.
regional() {
    local models; models=$(printf '%s\n' "${REGIONAL_SLICE[@]%%/*}" | sort -u | paste -sd, -)
    run_pytest regional "$(k_of "${REGIONAL_SLICE[@]}")" tests/test_gpu_benchmarks.py "${BENCH_ARGS[@]}" \
        --gpu-bench-models "$models" --compile-regions --benchmark-json "$OUTDIR/benchmarks-regional.json"
}
# The first train step's compile split into Dynamo, AOTAutograd and the backend, whole and regional.
cost() {
    local t; t=$(date +%s)
    timeout -s INT -k 60 "$STAGE_TIMEOUT" "$PYTHON" scripts/compile_cost.py "${COST_ARGS[@]}" \
        --variants regional,whole-no-cache --output "$OUTDIR/compile-cost.md" 2>&1 | tee "$OUTDIR/compile-cost.txt"
    local status=${PIPESTATUS[0]}
    section "compile cost (exit $status)" "$t"
    return "$status"
}
later() {
    run_pytest later "$(k_of "${LATER[@]}")" tests/test_train_eval_train.py tests/test_gpu_benchmarks.py \
        "${GATE_ARGS[@]}" "${BENCH_ARGS[@]}" --benchmark-json "$OUTDIR/benchmarks-later.json"
}
table() {
    local t; t=$(date +%s)
    timeout -s INT -k 60 "$STAGE_TIMEOUT" "$PYTHON" scripts/compare_compile.py "${TABLE_ARGS[@]}" \
        --output "$OUTDIR/table.md" 2>&1 | tee "$OUTDIR/table.txt"
    local status=${PIPESTATUS[0]}
    section "compare_compile table (exit $status)" "$t"
    return "$status"
}

started=$(date +%s)
final=0
for stage in "${STAGES[@]}"; do
    "$stage"
    status=$?
    [[ $final -eq 0 ]] && final=$status
    # 1: failed cases, judged and reported. 2: interrupted (the stage timeout), 3: internal error, 4: usage error
    # (the plugin did not load, say), 5: no test collected, 124/137: killed: the next stage would waste the call.
    if [[ $status -ge 2 ]]; then
        echo "stage $stage exited $status: stopping" >&2
        break
    fi
done
section "total" "$started"
echo "results in $OUTDIR: $(cd "$OUTDIR" && ls | tr '\n' ' ')"
exit "$final"

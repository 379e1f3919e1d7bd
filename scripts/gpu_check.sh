#!/usr/bin/env bash
# The GPU tier's check on one machine: a representative slice, its benchmarks and the MetaMathQA-style table.
#
#   scripts/gpu_check.sh OUTDIR          on a CUDA machine (target: under 8 minutes on one H200)
#   scripts/gpu_check.sh OUTDIR --cpu    the same code path on CPU with tiny configs and aot_eager
#
# Slice: LoRA, DoRA, IA3, LoHa and prompt tuning on llama-tiny and llama-3.2-1b: their train-eval-train
# GPU cases (the gate: breaks, recompiles, parity) and their benchmarks, in one pytest session so the
# compile report carries the benchmark figures; then compare_compile.py for LoRA on Llama-3.2-1B.
# (--cpu: LoRA and prompt tuning on llama-tiny; train-eval-train through the CPU tier.)
#
# Writes into OUTDIR: pytest.txt (the pytest output), benchmarks.json (--benchmark-json),
# compile-report.json (--compile-report), table.md, table.txt (its log), environment.txt, timings.txt.
# Installs nothing and needs no network. Exit status: pytest's, or the table's if pytest passed.
set -uo pipefail

usage() { echo "usage: $0 OUTDIR [--cpu]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
OUTDIR=$1
CPU=0
if [[ $# -eq 2 ]]; then [[ $2 == --cpu ]] || usage; CPU=1; fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
mkdir -p "$OUTDIR" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
PYTHON=${PYTHON:-python}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

METHODS=(lora lora-dora ia3 loha prompt-tuning)
# -k "llama-tiny/lora/ or ..." (a bare "lora/" would also match adalora/, glora/, ...)
slice_k() { local k="" model method; for model in "$@"; do for method in "${METHODS[@]}"; do
    k+="${k:+ or }$model/$method/"; done; done; echo "$k"; }
if [[ $CPU -eq 1 ]]; then
    # The code path, not the coverage: LoRA and prompt tuning on llama-tiny, the CPU tier's train-eval-train
    # cases (eager, with their budgets) and the gpu-marked benchmarks run on CPU (aot_eager).
    METHODS=(lora prompt-tuning)
    PYTEST_ARGS=(-m "not selftest" --gpu-tier-device cpu -k "$(slice_k llama-tiny)"
                 --gpu-bench-rounds 2 --gpu-bench-warmup 1 --gpu-bench-seq-len 16)
    TABLE_ARGS=(--model llama-tiny --method lora --steps 4 --batch-size 2 --seq-len 32 --eval-every 2
                --device cpu --backend aot_eager)
else
    PYTEST_ARGS=(-m gpu -k "$(slice_k llama-tiny llama-3.2-1b)"
                 --gpu-bench-rounds 5 --gpu-bench-warmup 2 --gpu-bench-seq-len 256)
    TABLE_ARGS=(--model llama-3.2-1b --method lora --steps 10 --batch-size 4 --seq-len 256 --eval-every 5
                --device cuda --backend inductor)
fi

started=$(date +%s)
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(hostname)"
    echo "mode: $([[ $CPU -eq 1 ]] && echo cpu || echo gpu)"
    echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (uncommitted changes)')"
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu: /'
    else
        echo "gpu: none (nvidia-smi not found)"
    fi
    "$PYTHON" - <<'EOF'
import platform
import torch
print(f"python: {platform.python_version()}")
print(f"torch: {torch.__version__} (cuda {torch.version.cuda}, available: {torch.cuda.is_available()})")
for name in ("transformers", "peft", "pytest", "pytest_benchmark", "xdist"):
    try:
        module = __import__(name)
        print(f"{name}: {getattr(module, '__version__', '?')}")
    except ImportError:
        print(f"{name}: not installed")
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        print(f"torch device {i}: {torch.cuda.get_device_name(i)}")
EOF
} >"$OUTDIR/environment.txt" 2>&1
cat "$OUTDIR/environment.txt"

section() { echo "$1: $(($(date +%s) - $2)) s" | tee -a "$OUTDIR/timings.txt"; }
: >"$OUTDIR/timings.txt"

t=$(date +%s)
"$PYTHON" -m pytest tests/test_train_eval_train.py tests/test_gpu_benchmarks.py "${PYTEST_ARGS[@]}" \
    -p no:cacheprovider -q -rA \
    --benchmark-json "$OUTDIR/benchmarks.json" --compile-report "$OUTDIR/compile-report.json" \
    2>&1 | tee "$OUTDIR/pytest.txt"
pytest_status=${PIPESTATUS[0]}
section "pytest (train-eval-train + benchmarks)" "$t"

t=$(date +%s)
"$PYTHON" scripts/compare_compile.py "${TABLE_ARGS[@]}" --output "$OUTDIR/table.md" 2>&1 | tee "$OUTDIR/table.txt"
table_status=${PIPESTATUS[0]}
section "compare_compile table" "$t"
section "total" "$started"

echo "results in $OUTDIR: $(cd "$OUTDIR" && ls | tr '\n' ' ')"
if [[ $pytest_status -ne 0 ]]; then exit "$pytest_status"; fi
exit "$table_status"

#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/../.." && . .venv/bin/activate
OUT=results/2026-12-02-cpu
{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem/{print $2}') GiB; no GPU"
  python - <<'PY'
import importlib.metadata as m, platform, torch
print(f"python: {platform.python_version()}")
print(f"torch: {torch.__version__} (threads {torch.get_num_threads()})")
for n in ("transformers", "peft", "pytest-benchmark"):
    print(f"{n}: {m.version(n)}")
PY
  echo "g++: $(g++ --version | head -1)"
} > $OUT/environment.txt
start=$(date +%s)
python scripts/compare_compile.py --model llama-small --method lora --steps 20 --batch-size 4 --seq-len 256 \
    --eval-every 5 --device cpu --backend inductor --output $OUT/table.md > $OUT/compare_compile.log 2>&1
echo "compare_compile exit $? in $(( $(date +%s) - start )) s" >> $OUT/timings.txt
start=$(date +%s)
pytest -p no:cacheprovider tests/test_gpu_benchmarks.py -m gpu --gpu-tier-device cpu --gpu-bench-models llama-small -k "llama-small/lora/" \
    --gpu-bench-rounds 10 --gpu-bench-warmup 3 --gpu-bench-batch-size 4 --gpu-bench-seq-len 256 \
    --benchmark-json $OUT/benchmarks.json --compile-report=$OUT/report.json > $OUT/pytest-bench.txt 2>&1
echo "pytest bench exit $? in $(( $(date +%s) - start )) s" >> $OUT/timings.txt

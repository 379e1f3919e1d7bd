#!/usr/bin/env bash
# The device plan's calls rehearsed on CPU, as the GPU machine runs them: from a bare copy of the tree (tracked and
# untracked-not-ignored files, no .git, nothing of this project installed) with $OUT as the only folder that comes
# back. Fails when the project is installed (it would hide a plugin that does not load), when a stage fails, or when
# a file the plan promises is missing from $OUT.
#
#   scripts/device_rehearsal.sh [OUT]      (default: a temporary folder, printed)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-$(command -v python3 || command -v python)}
if (cd / && "$PYTHON" -c "import importlib.metadata as m; m.version('peft-compile-gate')" 2>/dev/null); then
    echo "device_rehearsal: peft-compile-gate is installed for $PYTHON; the GPU machine has no install." >&2
    echo "Uninstall it (pip uninstall peft-compile-gate) or set PYTHON to an interpreter without it." >&2
    exit 2
fi
COPY=$(mktemp -d)
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # the run happens in the copy, which is removed at the end
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp -P --parents -t "$COPY")
echo "bare copy: $COPY (no .git: $([[ -e $COPY/.git ]] && echo no || echo yes)), OUT: $OUT"
export GIT_COMMIT
GIT_COMMIT=$(git -C "$ROOT" rev-parse --short HEAD)
cd "$COPY"

status=0
# The plan's stages, with its arguments (--only included), on CPU (results/README.md, "Device plan").
PYTHON=$PYTHON scripts/gpu_check.sh "$OUT/gate" --cpu --stage gate --only llama-tiny/lora --record-budgets || status=$?
PYTHON=$PYTHON scripts/gpu_check.sh "$OUT/bench" --cpu --stage bench,regional,cost,table || status=$((status ? status : $?))

missing=()
for file in gate/environment.txt gate/timings.txt gate/pytest-gate.txt gate/report-gate.json \
    gate/compile_budgets.toml bench/pytest-bench.txt bench/report-bench.json bench/benchmarks.json \
    bench/benchmarks-regional.json bench/compile-artifacts.bin bench/compile-cost.md bench/compile-cost.json bench/table.md bench/table.txt; do
    [[ -s $OUT/$file ]] || missing+=("$file")
done
echo "files under $OUT:"
(cd "$OUT" && find . -type f | sort | sed 's/^/  /')
if [[ ${#missing[@]} -gt 0 ]]; then
    echo "device_rehearsal: missing under \$OUT: ${missing[*]}" >&2
    exit 1
fi
grep -q "commit: $GIT_COMMIT" "$OUT/gate/environment.txt" || { echo "device_rehearsal: commit not recorded" >&2; exit 1; }
grep -q "loaded by conftest.py" "$OUT/gate/environment.txt" || { echo "device_rehearsal: plugin was installed" >&2; exit 1; }
rm -rf "$COPY"
exit "$status"

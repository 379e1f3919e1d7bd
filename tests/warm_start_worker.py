"""One process of the warm-start scenario (tests/test_warm_start.py): build a case's PEFT model, compile it with
inductor under the case's policy, run a train step and an eval step, and print the cache counters as JSON.

    python -m tests.warm_start_worker cold|warm MODEL METHOD ARTIFACTS

``cold`` saves this process's compile artifacts to ARTIFACTS afterwards; ``warm`` loads them before anything
compiles. The caller gives each process an inductor cache directory of its own (TORCHINDUCTOR_CACHE_DIR).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from bench_models import build_peft_model, eval_step, make_batch, make_optimizer, train_step
from compile_audit.probe.compile_cache import CacheWatch
from compile_audit.probe.compile_cost import CompileCostWatch
from compile_audit.probe.recompiles import PhaseAudit
from compile_audit.probe.warm_start import load_artifacts, save_artifacts
from tests.cases import Case


def main(argv: list[str]) -> int:
    mode, model_key, method, artifacts = argv[0], argv[1], argv[2], Path(argv[3])
    if mode not in ("cold", "warm"):
        raise SystemExit(f"warm_start_worker: mode must be cold or warm, not {mode!r}")
    if mode == "warm":
        load_artifacts(artifacts)
    case = Case(model_key, method, "warm-start", "cpu", "inductor")
    policy = case.compile_policy(audited=False)
    with policy.applied():
        torch.manual_seed(0)
        model = build_peft_model(model_key, method, dropout=0.0)
        optimizer = make_optimizer(model)
        batch = make_batch(model_key, method, batch_size=2, seq_len=8)
        audit = PhaseAudit(backend="inductor", dynamic=policy.dynamic)
        compiled = audit.compile(model)
        with CacheWatch() as watch, CompileCostWatch() as cost:
            with audit.phase("train", "train"):
                train_step(compiled, optimizer, batch)
            with audit.phase("eval", "eval"):
                eval_step(compiled, batch)
    saved = save_artifacts(artifacts) if mode == "cold" else 0
    frames = sum(p.frames_compiled for p in audit.phases)
    print(json.dumps({**watch.counts, "frames": frames, "restarts": len(cost.cost.restarts), "saved_bytes": saved}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

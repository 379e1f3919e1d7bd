"""Hand-written compile reports (the shape ``pytest --compile-report`` writes) for the diff and matrix self-tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compile_audit.artifacts import records
from compile_audit.artifacts.json_fields import Where
from compile_audit.artifacts.records import CaseRecord
from compile_audit.artifacts.report import SCHEMA
from compile_audit.case_ids import CaseId
from compile_audit.frames import Guard
from compile_audit.normalize import normalize
from compile_audit.probe.guards import parse_guard_failure

VERSIONS = {"python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "5.24.0", "peft": "0.21.2"}
LOHA_REASON = (
    "Data-dependent branching: Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`). "
    "Dynamo does not support tracing dynamic control flow."
)
LOHA_SOURCE = "if (not self.training) or (self.training and torch.rand(1) > module_dropout):"
EVAL_RECOMPILE = "1/0: ___check_obj_id(L['self'].training, 9560096) (guard from peft/peft_model.py:1811)"
DEPRECATION_FRAME = "wrapped_func at transformers/utils/deprecation.py:121"
TYPE_ID_RECOMPILE = (
    "9/0: ___check_type_id(args[0], 94059199957264), type=<class "
    "'transformers.models.llama.modeling_llama.LlamaForCausalLM'> (guard from transformers/utils/deprecation.py:126)"
)


def brk(location: str, reason: str, source: str = "", occurrences: int = 1) -> dict[str, Any]:
    return {"reason": reason, "location": location, "source": source, "occurrences": occurrences}


def root_of(brk: dict[str, Any]) -> dict[str, Any]:
    """The root record (compile_audit.rules.roots) of a hand-written break: where Dynamo stopped, no consequences."""
    file = brk["location"].rsplit(":", 1)[0]
    return {
        "identity": f"{file} in forward: {brk['reason'].split(':', 1)[0]}",
        "location": brk["location"],
        "function": "forward",
        "reason": brk["reason"],
        "source": brk["source"],
        "via": "",
        "hits": brk["occurrences"],
        "phases": ["train-1"],
        "consequences": {},
    }


def recompile(phase: str, reason: str, expected: bool, frame: str = "forward at peft/peft_model.py:1801") -> dict:
    compile_id = Guard.parse(reason).entry
    guard = reason.removeprefix(f"{compile_id}: ")
    return {
        "phase": phase,
        "frame": frame,
        "compile_id": compile_id.partition("/")[0] + "/1",  # the frame's next compile
        "expected": expected,
        "reason": reason,
        "signature": f"{normalize(frame)}: {parse_guard_failure(guard).kind}",  # as Recompile.signature makes it
        "failures": [{"entry": compile_id, "guard": guard, "location": "peft/peft_model.py:1811"}],
    }


def case(
    case_id: str,
    status: str = "passed",
    *,
    breaks: Sequence[dict] = (),
    break_budget: int = 0,
    recompiles: Sequence[dict] = (),
    recompile_budget: int | None = None,
    message: str | None = None,
    benchmarks: dict | None = None,
    audited: bool | None = None,
) -> dict[str, Any]:
    """One case record, as the plugin writes it (a CaseRecord's JSON: every field, the unset ones empty); a skipped
    case (by default an error too) is not audited: no phases, zero counts."""
    parsed = CaseId.parse(case_id)
    model, method, scenario, device, backend = (
        parsed.model,
        parsed.method,
        parsed.scenario,
        parsed.device,
        parsed.backend,
    )
    audited = status not in ("skipped", "error") if audited is None else audited
    breaks, recompiles = list(breaks) if audited else [], list(recompiles) if audited else []
    count = sum(b["occurrences"] for b in breaks)
    calls = [{"call": "train-1", "count": count, "graph_count": count + 1, "breaks": breaks}] if breaks else []
    phase_names = ("train-1", "eval-1", "train-4") if audited else ()
    phases = [
        {
            "name": name,
            "kind": name.split("-")[0],
            "first_transition": name == "eval-1",
            "frames_compiled": 3,
            "graphs_compiled": 3,
            "compile_seconds": 1.5,
            "seconds": 2.0,
            "graph_breaks": count if name == "train-1" else 0,
            "recompiles": [r for r in recompiles if r["phase"] == name],
        }
        for name in phase_names
    ]
    return written(
        {
            "id": case_id,
            "model": model,
            "method": method,
            "scenario": scenario,
            "device": device,
            "backend": backend,
            "tier": "cpu" if device == "cpu" else "cuda",
            "audited": audited,
            "wall_seconds": 4.2 if audited else 0.0,
            "status": status,
            "message": message,
            "graph_breaks": {
                "count": count,
                "budget": break_budget,
                "roots": [root_of(b) for b in breaks],
                "calls": calls,
            },
            "recompiles": {
                "count": len(recompiles),
                "unexpected": sum(not r["expected"] for r in recompiles),
                "budget": recompile_budget,
                "unexpected_budget": 0,
                "events": recompiles,
            },
            "steady_state_compiles": 0,
            "compile_seconds": 4.5 if audited else 0.0,
            "phases": phases,
            "benchmarks": benchmarks or {},
        }
    )


def written(data: dict[str, Any]) -> dict[str, Any]:
    return records.written(data, Where("fake report")).to_dict()


def record(data: dict[str, Any]) -> CaseRecord:
    """A hand-written case as the report's readers get it."""
    return CaseRecord.from_dict(data, Where("fake report"))


def plugin_case(case_id: str = "llama-tiny/loha/train-eval-train") -> dict[str, Any]:
    """A failed case with every field the plugin writes (compile_gate.plugin), each one set."""
    data = case(
        case_id,
        "failed",
        breaks=[brk("peft/tuners/loha/layer.py:241", LOHA_REASON, LOHA_SOURCE, occurrences=6)],
        recompiles=[
            recompile("eval-1", EVAL_RECOMPILE, expected=True),
            recompile("train-4", TYPE_ID_RECOMPILE, expected=False, frame=DEPRECATION_FRAME),
        ],
        break_budget=4,
        recompile_budget=3,
        message=f"{case_id}: graph breaks 6/4\n- over budget",
        benchmarks={"compiled_step_ms": 12.5, "reserved_max_bytes": 2**30, "policy": {"threads": 2}},
    )
    events = data["recompiles"]["events"]
    events[0]["consequence"], events[1]["consequence"] = False, True
    limit_hit = {"phase": "train-4", "frame": DEPRECATION_FRAME, "limit": "recompile_limit (8)", "last_guard": "x"}
    for index, phase in enumerate(data["phases"]):
        phase.update(operations_captured=40 + index, guards=12 + index, limit_hits=[], dynamo_counted_breaks=index)
    data["phases"][2]["limit_hits"] = [limit_hit]
    data["phases"][1]["ddp_splits"] = [{"pieces": 2, "bucket_bytes_cap": 1024, "bucket_params": [3, 4]}]
    data["graph_breaks"].update(signatures=[data["graph_breaks"]["roots"][0]["identity"]], records=8)
    data["graph_breaks"]["roots"][0].update(
        via="peft/tuners/loha/model.py:80",
        consequences={
            "eager_frames": ["forward at peft/tuners/loha/layer.py:230"],
            "nested_breaks": ["inner at x.py:1: Unsupported"],
            "recompiles": [events[1]["reason"]],
            "limit_hits": ["[train-4] wrapped_func hit Dynamo's recompile_limit (8)"],
        },
    )
    data["recompiles"].update(signatures=[events[1]["signature"]], consequences=1, limit_hits=[limit_hit])
    data.update(
        ddp_splits={"count": 1, "budget": 1},
        steady_state_compiles=1,
        frames_compiled=9,
        allowed_by_causes=[{"cause": "checkpointing", "identity": "x.py in f: gb0001", "count": 2}],
        footprint={"peft/tuners/loha/layer.py": ["Linear.forward", "LoHaLayer.update_layer"]},
        footprint_lines={"peft/tuners/loha/layer.py": [230, 241]},
        footprint_build_only={"peft/tuners/loha/layer.py": ["LoHaLayer.update_layer"]},
        footprint_elsewhere=True,
        problems=[{"kind": "over budget", "names": [], "held": False, "summary": "graph breaks: 6 > budget 4"}],
        headline=f"{case_id}: graph breaks 6/4",
        raised="RuntimeError",
        error="boom",
        policy={"dynamo": {"recompile_limit": 8}, "threads": 2},
    )
    return data


def report(cases: list[dict[str, Any]], **versions: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "created": "2026-11-30T03:00:00+00:00",
        "versions": {**VERSIONS, **versions},
        "cases": sorted(cases, key=lambda c: c["id"]),
    }


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def base_cases() -> list[dict[str, Any]]:
    """A CPU-tier run of peft 0.21.2: LoRA and IA3 clean, LoHa over budget, a GPU case skipped."""
    expected_eval = recompile("eval-1", EVAL_RECOMPILE, expected=True)
    return [
        case("llama-tiny/lora/train-eval-train", recompiles=[expected_eval]),
        case("llama-tiny/ia3/train-eval-train", recompiles=[expected_eval]),
        case(
            "llama-tiny/loha/train-eval-train",
            "failed",
            breaks=[brk("peft/tuners/loha/layer.py:241", LOHA_REASON, LOHA_SOURCE, occurrences=6)],
            recompiles=[expected_eval]
            + [recompile("train-1", TYPE_ID_RECOMPILE, expected=False, frame=DEPRECATION_FRAME)] * 2,
            message="llama-tiny/loha/train-eval-train: graph breaks 6/0, unexpected recompiles 2/0",
        ),
        case("qwen2-tiny/lora/train-eval-train", recompiles=[expected_eval]),
        case(
            "llama-3.2-1b/lora/train-eval-train@cuda-inductor",
            "skipped",
            message="GPU tier: CUDA is not available on this machine",
        ),
    ]

"""Roots and consequences (compile_audit.rules.roots): a break is counted where Dynamo stopped, once; the frames it sent
back to Python, and what they then compiled, are listed under it and never counted on their own."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch._dynamo

from compile_audit.frames import Frame
from compile_audit.probe.graph_breaks import GraphBreak
from compile_audit.probe.guards import GuardFailure
from compile_audit.probe.recompiles import PhaseRecord, Recompile, RecompileLimitHit
from compile_audit.rules.budgets import Budget
from compile_audit.rules.case import CaseAudit
from compile_audit.rules.result import AuditResult
from compile_audit.rules.roots import EAGER_MARK, attribute
from compile_audit.rules.verdict import Kind, judge, limit_frame

pytestmark = pytest.mark.selftest


def _planted_here(name: str) -> str:
    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    (number,) = [n for n, line in enumerate(lines, start=1) if line.endswith(f"# PLANTED:{name}")]
    return f"tests/selftest/test_roots.py:{number}"


@contextlib.contextmanager
def _hooks():
    yield


def _breaks_inside(x: torch.Tensor) -> torch.Tensor:
    x = x + 1
    torch._dynamo.graph_break()  # PLANTED:inside-hook
    return x * 2


class BreaksBelowAHook(torch.nn.Module):
    """A break in a function called inside a generator context manager: Dynamo cannot resume the caller there, so
    it runs forward eagerly and compiles the callee as a frame of its own (as PEFT's forward around its hooks)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with _hooks():
            return _breaks_inside(x)


class GivesUpAtItsOwnLine(torch.nn.Module):
    """The break is in forward's own code, inside the hook: the top-level frame is skipped, a root of its own."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with _hooks():
            x = x + 1
            torch._dynamo.graph_break()
            return x * 2


def _audit(module: torch.nn.Module, under_test: tuple[str, ...] = ("tests",), lengths=(2, 3)) -> CaseAudit:
    audit = CaseAudit("toy/roots/train", Budget(), under_test=under_test)
    compiled = audit.compile(module)
    for n, length in enumerate(lengths):
        with audit.phase(f"train-{n + 1}", kind="train"):
            compiled(torch.ones(length))
    return audit


def test_the_frames_a_break_sends_back_to_python_are_its_consequences_not_breaks():
    audit = _audit(BreaksBelowAHook())
    result = audit.result
    (root,) = result.roots
    assert result.graph_break_count == 1
    assert root.location == _planted_here("inside-hook") and root.function == "_breaks_inside"
    assert root.identity.startswith("tests/selftest/test_roots.py in _breaks_inside: gb")
    assert [b.eager_function.split(" at ")[0] for b in root.eager_frames] == ["forward"]
    # _breaks_inside is compiled only because forward ran eagerly: its recompile (a new length) is the root's
    assert result.all_recompiles and not result.recompiles
    assert {r.frame.split(" at ")[0] for r in root.recompiles} >= {"_breaks_inside"}
    assert result.break_records > result.graph_break_count
    message = audit.verdict().message
    lines = message.splitlines()
    assert lines[0].startswith("toy/roots/train: graph breaks (roots) 1/0")
    assert lines[1] == "roots (where Dynamo stopped; fix these):"
    assert "_breaks_inside" in lines[2] and "torch._dynamo.graph_break()" in lines[3]
    assert "so Dynamo ran 1 enclosing frame(s) eagerly: forward at" in message
    assert "recompile(s) of frames compiled because of it" in message


def test_a_frame_that_gives_up_at_its_own_line_is_a_root():
    audit = _audit(GivesUpAtItsOwnLine(), lengths=(2,))
    (root,) = audit.result.roots
    assert root.function == "forward" and root.identity.endswith(EAGER_MARK)
    assert audit.result.graph_break_count == 1 and audit.verdict().status == "failed"


def test_a_break_outside_the_code_under_test_names_the_frame_of_it_that_reached_it(tmp_path, monkeypatch):
    package = tmp_path / "upstream_lib"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent(
            """
            import torch

            def helper(x):
                x = x + 1
                torch._dynamo.graph_break()
                return x * 2
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("upstream_lib", None)
    import upstream_lib

    class CallsUpstream(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return upstream_lib.helper(x) + 1

    (root,) = _audit(CallsUpstream(), lengths=(2,)).result.roots
    assert root.location.startswith("upstream_lib/__init__.py:")
    assert root.via.startswith("tests/selftest/test_roots.py:") and root.via.endswith(" in forward")
    assert root.identity.endswith(" via tests/selftest/test_roots.py in forward")
    (unnamed,) = _audit(CallsUpstream(), under_test=(), lengths=(2,)).result.roots
    assert unnamed.via == "" and " via " not in unnamed.identity


# Attribution on recorded data: frames, their callers and what each compile did, as a phase records them.
ENTRY, HOOKED, COMPREHENSION, HELPER = (
    "forward at pkg/model.py:10",
    "forward at pkg/layer.py:20",
    "<dictcomp> at pkg/model.py:15",
    "wrapped_func at lib/deprecation.py:5",
)


def _eager(code: str, line: int, compile_id: str, stopped_at: str = "") -> GraphBreak:
    frame = Frame.parse(code)
    name, where = frame.function, f"{frame.file}:{frame.line}"
    return GraphBreak(
        reason="Missing tp_iternext: ..." if not stopped_at else "Call to graph_break (the break: x)",
        location=f"{where.rsplit(':', 1)[0]}:{line}",
        source="",
        function=name,
        eager_function=code,
        graph_break_id="gb4347" if not stopped_at else "gb0025",
        stopped_at=stopped_at,
        stopped_in="forward" if stopped_at else "",
        compile_id=compile_id,
    )


def _phase(limit_guard: str = "(guard from lib/deprecation.py:7)") -> PhaseRecord:
    root_break = GraphBreak(
        reason="Call to graph_break", location="pkg/layer.py:22", source="", function="forward",
        graph_break_id="gb0025", compile_id="1/0",
    )  # fmt: skip
    failure = GuardFailure("3/0", "len(args) == 1", "lib/deprecation.py:7")
    return PhaseRecord(
        name="train-1",
        kind="train",
        first_transition=False,
        graph_breaks=[
            root_break,
            _eager(ENTRY, 12, "0/0", stopped_at="pkg/layer.py:22"),
            _eager(COMPREHENSION, 15, "2/0"),
        ],
        recompiles=[Recompile("train-1", HELPER, "3/1", (failure,), expected=False)],
        limit_hits=[RecompileLimitHit("train-1", HELPER, "recompile_limit (8)", limit_guard)],
        frame_codes={"0/0": ENTRY, "1/0": HOOKED, "2/0": COMPREHENSION, "3/0": HELPER, "3/1": HELPER},
        callers={
            "0/0": [["train_step at harness.py:1", "harness.py:3 in train_step"]],
            "1/0": [[ENTRY, "pkg/model.py:12 in forward"]],
            "2/0": [[ENTRY, "pkg/model.py:15 in forward"]],
            "3/1": [[ENTRY, "pkg/model.py:16 in forward"]],
        },
    )


def test_a_comprehension_compiled_only_because_its_caller_ran_eagerly_is_a_consequence():
    found = attribute([_phase()], under_test=("pkg",))
    (root,) = found.roots
    assert root.location == "pkg/layer.py:22" and root.hits == 1
    assert [b.eager_function for b in root.eager_frames] == [ENTRY]
    assert [b.eager_function for b in root.nested_breaks] == [COMPREHENSION]


def test_a_recompile_and_a_limit_hit_of_a_frame_compiled_because_of_a_root_are_its_consequences():
    found = attribute([_phase()], under_test=("pkg",))
    (root,) = found.roots
    assert [r.frame for r in root.recompiles] == [HELPER] and found.recompiles == []
    assert [h.frame for h in root.limit_hits] == [HELPER] and found.limit_hits == []


def test_a_limit_hit_that_is_a_consequence_still_fails_under_its_root_unless_a_known_failure_names_it():
    """Dynamo giving up is a failure, never a budget: a budgeted root whose echoes reach the limit, and so run part
    of the model eagerly, fails the case; only ``known_recompile_limit`` naming that frame holds it."""
    result = AuditResult(phases=[_phase()], under_test=("pkg",))
    budget = Budget(graph_breaks=1, recompiles=1, break_signatures=(result.roots[0].identity,), note="n", recorded=True)
    verdict = judge("toy/limit/train", result, budget)
    assert verdict.status == "failed" and [p.kind for p in verdict.problems] == [Kind.RECOMPILE_LIMIT]
    assert f"{HELPER} hit Dynamo's recompile_limit (8)" in verdict.message
    assert "(a consequence of the root at pkg/layer.py:22 in forward)" in verdict.message
    assert not verdict.feeds_budget
    frame = limit_frame(HELPER)
    held = dataclasses.replace(budget, known_recompile_limit=(frame,), known_failure="the helper recompiles per caller")
    assert judge("toy/limit/train", result, held).status == "xfailed"


def test_a_recompile_on_a_guard_the_code_under_test_installed_is_judged_on_its_own():
    """IA3's merged flag changes on merge: PEFT's state, which recompiles the frame whatever made it a target."""
    phase = _phase()
    merged = GuardFailure("3/1", "not self.base_model.layers.0.merged_adapters", "pkg/model.py:11")
    recompile = Recompile("train-1", HELPER, "3/2", (merged,), expected=False)
    phase.recompiles.append(recompile)
    phase.callers["3/2"] = [[ENTRY, "pkg/model.py:16 in forward"]]
    found = attribute([phase], under_test=("pkg",))
    assert found.recompiles == [recompile]
    assert [r.compile_id for r in found.roots[0].recompiles] == ["3/1"]


def test_a_limit_hit_on_a_guard_the_code_under_test_installed_stays_a_failure_of_its_own():
    found = attribute([_phase(limit_guard="3/7: not args (guard from pkg/layer.py:30)")], under_test=("pkg",))
    assert [h.frame for h in found.limit_hits] == [HELPER]


def test_a_limit_hit_on_a_frame_of_the_code_under_test_stays_a_failure_of_its_own():
    """Cartridge's embedding recompiles on every call (a class per call): its frame is PEFT's, whatever called it."""
    phase = _phase(limit_guard="(not given)")
    hit = RecompileLimitHit("train-1", "weight at pkg/layer.py:40", "recompile_limit (8)", "(not given)")
    phase.recompiles.append(Recompile("train-1", hit.frame, "4/1", (), expected=False))
    phase.callers["4/1"] = [[ENTRY, "pkg/model.py:17 in forward"]]
    phase.limit_hits = [hit]
    found = attribute([phase], under_test=("pkg",))
    assert found.limit_hits == [hit] and not found.roots[0].limit_hits


def test_nothing_is_a_consequence_of_nothing():
    """A nested compile no root explains (its caller ran no break) is judged on its own."""
    phase = _phase()
    phase.graph_breaks = [_eager(COMPREHENSION, 15, "2/0")]
    found = attribute([phase], under_test=("pkg",))
    (root,) = found.roots
    assert root.function == "<dictcomp>" and root.identity.endswith(EAGER_MARK)
    assert [r.frame for r in found.recompiles] == [HELPER]
    assert [h.frame for h in found.limit_hits] == [HELPER]


def test_a_frame_run_eagerly_takes_the_stack_of_its_own_break(tmp_path):
    """Two breaks' tracebacks pass through forward; the root is reached from the frame on the one that ends where
    Dynamo stopped, not from a comprehension of the other."""
    import types

    from compile_audit.probe.frame_records import eager_frame_break

    model, upstream = str(tmp_path / "pkg" / "model.py"), str(tmp_path / "lib" / "wrapper.py")
    metrics = types.SimpleNamespace(
        co_name="forward", co_filename=model, co_firstlineno=8, compile_id="0/0", fail_type="Unsupported",
        fail_reason="logging.Logger method not supported", fail_user_frame_filename=upstream, fail_user_frame_lineno=60,
    )  # fmt: skip
    tracebacks = [
        [(model, 12, "forward"), (model, 12, "<dictcomp>")],
        [(model, 14, "forward"), (str(tmp_path / "pkg" / "tuner.py"), 30, "forward"), (upstream, 60, "helper")],
    ]
    brk = eager_frame_break(metrics, tracebacks)
    assert brk.location.endswith("model.py:14") and brk.stopped_in == "helper"
    assert [entry.rsplit(" in ", 1)[1] for entry in brk.stack] == ["forward", "forward", "helper"]


def test_a_resume_function_names_the_function_and_the_line_it_resumes():
    resume = Frame.parse("torch_dynamo_resume_in_forward_at_201 at peft/tuners/lora/layer.py:201")
    assert (resume.resumes, resume.resumed_line, resume.own_function) == ("forward", 201, "forward")
    plain = Frame.parse("forward at peft/tuners/lora/layer.py:190")
    assert (plain.resumes, plain.resumed_line, plain.own_function) == (None, None, "forward")

"""The report diff: a planted regression fails it (case, change, location named), identical reports pass."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from compile_audit.artifacts import diff
from tests.selftest import fake_reports as fake

pytestmark = pytest.mark.selftest
REPO_ROOT = Path(__file__).resolve().parents[2]
LORA = "llama-tiny/lora/train-eval-train"
LOHA = "llama-tiny/loha/train-eval-train"
IA3 = "llama-tiny/ia3/train-eval-train"
GPU = "llama-3.2-1b/lora/train-eval-train@cuda-inductor"
LORA_REASON = "Data-dependent branching: Detected data-dependent branching in lora dropout"


def _run(tmp_path, base_cases, head_cases, *options, head_versions=None, capsys):
    base = fake.write(tmp_path / "base.json", fake.report(base_cases))
    head = fake.write(tmp_path / "head.json", fake.report(head_cases, **(head_versions or {})))
    code = diff.main([str(base), str(head), *options])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _by_id(cases):
    return {c["id"]: c for c in cases}


def _head_with(**replacements):
    """The base run, with some cases replaced (None removes one)."""
    cases = _by_id(copy.deepcopy(fake.base_cases()))
    for case_id, replacement in replacements.items():
        cases.pop(case_id)
        if replacement is not None:
            cases[replacement["id"]] = replacement
    return list(cases.values())


def _lora_with_breaks(occurrences=3, status="failed"):
    expected_eval = fake.recompile("eval-1", fake.EVAL_RECOMPILE, expected=True)
    return fake.case(
        LORA,
        status,
        breaks=[fake.brk("peft/tuners/lora/layer.py:712", LORA_REASON, "if self.training:", occurrences)],
        recompiles=[expected_eval],
    )


def _section(out, title):
    """The lines of one '### title' section of the diff (title, blank line, bullets)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"### {title}"))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("###")), len(lines))
    return lines[start:end]


def test_identical_reports_say_no_changes_and_pass(tmp_path, capsys):
    passing = [case for case in fake.base_cases() if case["status"] == "passed"]
    code, out, _ = _run(tmp_path, passing, passing, capsys=capsys)
    assert code == 0
    assert "no changes" in out.splitlines()
    assert "torch 2.13.0+cpu, transformers 5.24.0, peft 0.21.2" in out
    # LoHa fails on both sides and the GPU case is skipped: no change, and the first line says what judged nothing.
    code, out, _ = _run(tmp_path, fake.base_cases(), fake.base_cases(), capsys=capsys)
    assert code == 0
    verdict = "no changes; 1 case(s) fail on both sides and judge nothing of this change; 1 skipped on head"
    assert out.splitlines()[2] == verdict


def test_planted_graph_breaks_fail_naming_case_change_and_location(tmp_path, capsys):
    head = _head_with(**{LORA: _lora_with_breaks()})
    code, out, _ = _run(tmp_path, fake.base_cases(), head, head_versions={"peft": "0.22.0.dev0"}, capsys=capsys)
    assert code == 1
    regressions = "\n".join(_section(out, "Regressions"))
    assert f"**{LORA}**: status passed -> failed; graph breaks (roots) 0 -> 3 (+3), first at" in regressions
    assert "`peft/tuners/lora/layer.py:712`: Data-dependent branching" in regressions
    assert "new root at `peft/tuners/lora/layer.py:712` (train-1, x3)" in regressions
    assert "`if self.training:`" in regressions
    assert "(differs: peft)" in out
    assert "no changes" not in out


def test_unexpected_recompile_regression_lists_only_the_new_reason(tmp_path, capsys):
    loha = copy.deepcopy(_by_id(fake.base_cases())[LOHA])
    # The same guard failures as base with other run-specific ids, in code that moved down 4 lines: not new.
    for event in loha["recompiles"]["events"][1:]:
        event["reason"] = event["reason"].replace("94059199957264", "94311122233344").replace("9/0", "12/0")
        event["reason"] = event["reason"].replace("deprecation.py:126", "deprecation.py:130")
        event["frame"] = event["frame"].replace("deprecation.py:121", "deprecation.py:125")
    new_reason = "3/0: tensor 'L['input_ids']' size mismatch at index 1. expected 8, actual 12"
    loha["recompiles"]["events"].append(fake.recompile("train-2", new_reason, expected=False))
    loha["recompiles"]["count"] += 1
    loha["recompiles"]["unexpected"] += 1
    code, out, _ = _run(tmp_path, fake.base_cases(), _head_with(**{LOHA: loha}), capsys=capsys)
    assert code == 1
    lines = _section(out, "Regressions")
    assert f"- **{LOHA}**: unexpected recompiles 2 -> 3 (+1); recompiles 3 -> 4 (+1)" in lines
    new = [line for line in lines if "new unexpected recompile" in line]
    assert len(new) == 1, lines
    assert "in train-2 of `forward at peft/peft_model.py:1801`" in new[0]
    assert "size mismatch at index 1" in new[0]


def test_the_diff_opens_with_each_new_root_once_with_the_cases_it_made_worse(tmp_path, capsys):
    """peft#3558 undone made 21 cases worse with one line: the diff names that root once, then the cases."""
    expected_eval = fake.recompile("eval-1", fake.EVAL_RECOMPILE, expected=True)
    root = fake.brk("peft/peft_model.py:1915", "Unsupported method call: warn", "return_dict = self.config.x", 1)
    ia3 = fake.case(IA3, "failed", breaks=[root], recompiles=[expected_eval])
    head = _head_with(**{LORA: _lora_with_breaks(), IA3: ia3})
    lora_root = dict(_lora_with_breaks()["graph_breaks"]["roots"][0])
    head_lora = next(c for c in head if c["id"] == LORA)
    head_lora["graph_breaks"]["roots"].append(fake.root_of(root))
    code, out, _ = _run(tmp_path, fake.base_cases(), head, capsys=capsys)
    assert code == 1
    roots = _section(out, "New roots")
    assert roots[0] == "### New roots (2): where Dynamo now stops, the places to fix"
    assert roots[2].startswith("- `peft/peft_model.py:1915` (train-1): Unsupported method call")
    assert roots[3].startswith(f"  - identity `{fake.root_of(root)['identity']}`; in 2 worse case(s): ")
    assert IA3 in roots[3] and LORA in roots[3]
    assert roots[4].startswith(f"- `{lora_root['location']}`")
    assert out.index("### New roots") < out.index("### Regressions")


def test_moved_break_is_not_new_and_more_of_the_same_is_counted(tmp_path, capsys):
    loha = copy.deepcopy(_by_id(fake.base_cases())[LOHA])
    # The PR moved LoHa's break down 4 lines and hit it twice more: same break, more occurrences.
    moved = fake.brk("peft/tuners/loha/layer.py:245", fake.LOHA_REASON, fake.LOHA_SOURCE, occurrences=8)
    calls = [{"call": "train-1", "count": 8, "graph_count": 20, "breaks": [moved]}]
    loha["graph_breaks"].update(count=8, calls=calls, roots=[fake.root_of(moved)])
    code, out, _ = _run(tmp_path, fake.base_cases(), _head_with(**{LOHA: loha}), capsys=capsys)
    assert code == 1
    lines = _section(out, "Regressions")
    assert lines[2] == f"- **{LOHA}**: graph breaks (roots) 6 -> 8 (+2)"  # no "first at": nothing new
    assert lines[3].startswith("  - +2 hits of root at `peft/tuners/loha/layer.py:245` (train-1, x8)")
    assert not any("new root" in line for line in lines)


def test_improvements_pass_and_regressions_come_first_worst_first(tmp_path, capsys):
    loha_fixed = fake.case(LOHA, recompiles=[fake.recompile("eval-1", fake.EVAL_RECOMPILE, expected=True)])
    ia3 = fake.case(
        IA3, "failed", breaks=[fake.brk("peft/tuners/ia3/layer.py:98", "Unsupported: call_method", occurrences=1)]
    )
    code, out, _ = _run(tmp_path, fake.base_cases(), _head_with(**{LOHA: loha_fixed}), capsys=capsys)
    assert code == 0
    improvement = _section(out, "Improvements")[2]
    assert f"- **{LOHA}**: status failed -> passed; graph breaks (roots) 6 -> 0 (-6)" in improvement
    assert "### Regressions" not in out

    head = _head_with(**{LOHA: loha_fixed, LORA: _lora_with_breaks(occurrences=5), IA3: ia3})
    code, out, _ = _run(tmp_path, fake.base_cases(), head, capsys=capsys)
    assert code == 1
    changed = out[: out.index("### Not judged")].splitlines()  # the GPU case, skipped on both sides, is listed there
    listed = [line.split("**")[1] for line in changed if line.startswith("- **")]
    assert listed == [LORA, IA3, LOHA]  # +5 breaks before +1, then the improvement
    assert out.index("### Regressions (2)") < out.index("### Improvements (1)")


def test_status_changes(tmp_path, capsys):
    error = fake.case(LORA, "error", message="RuntimeError: boom\nTraceback ...")
    code, out, _ = _run(tmp_path, fake.base_cases(), _head_with(**{LORA: error}), capsys=capsys)
    assert code == 1
    assert f"- **{LORA}**: status passed -> error" in out
    assert "  - error: RuntimeError: boom" in out

    skipped = fake.case(IA3, "skipped", message="ia3 needs peft>=0.23")
    code, out, _ = _run(tmp_path, fake.base_cases(), _head_with(**{IA3: skipped}), capsys=capsys)
    assert code == 1, "a case no longer audited is a regression"
    assert f"- **{IA3}**: status passed -> skipped" in out
    assert "recompiles" not in _section(out, "Regressions")[2], "counts of an unaudited case are not compared"


def _gpu(step_ms=12.0, reserved=2 * 2**30):
    return fake.case(
        GPU, benchmarks={"compiled_step_ms": step_ms, "eager_step_ms": 20.1, "reserved_max_bytes": reserved}
    )


@pytest.mark.parametrize(
    ("head_ms", "options", "expected_code", "expected_text"),
    [
        (12.6, [], 0, "no changes"),  # +5%: noise under the 10% default
        (15.0, [], 1, "compiled step 12.0 -> 15.0 ms (+25.0%)"),
        (15.0, ["--timing-threshold", "30"], 0, "no changes"),
        (9.0, [], 0, "compiled step 12.0 -> 9.0 ms (-25.0%)"),
    ],
)
def test_step_time_counts_only_beyond_the_threshold(tmp_path, capsys, head_ms, options, expected_code, expected_text):
    code, out, _ = _run(tmp_path, [_gpu()], [_gpu(step_ms=head_ms)], *options, capsys=capsys)
    assert (code, expected_text in out) == (expected_code, True), out


def test_memory_growth_beyond_five_percent_regresses(tmp_path, capsys):
    code, out, _ = _run(tmp_path, [_gpu()], [_gpu(reserved=int(2.2 * 2**30))], capsys=capsys)
    assert code == 1
    assert "reserved_max_bytes 2048.0 -> 2252.8 MiB (+10.0%)" in out
    code, out, _ = _run(tmp_path, [_gpu()], [_gpu(reserved=int(2.08 * 2**30))], capsys=capsys)
    assert (code, "no changes" in out) == (0, True)


@pytest.mark.parametrize("value", ["-1", "1001", "nan", "ten"])
@pytest.mark.parametrize("option", ["--timing-threshold", "--memory-threshold"])
def test_absurd_thresholds_are_usage_errors_naming_the_option(tmp_path, capsys, option, value):
    path = fake.write(tmp_path / "r.json", fake.report(fake.base_cases()))
    with pytest.raises(SystemExit) as exit_info:
        diff.main([str(path), str(path), f"{option}={value}"])
    assert exit_info.value.code == 2
    assert option in capsys.readouterr().err


def test_cases_only_in_one_report(tmp_path, capsys):
    # Missing from head: audited in base is a regression, skipped in base is not.
    code, out, _ = _run(tmp_path, fake.base_cases(), _head_with(**{IA3: None}), capsys=capsys)
    assert code == 1
    assert f"- **{IA3}**: passed, graph breaks 0, recompiles 1 (0 unexpected) — **regression**" in out
    code, out, _ = _run(tmp_path, fake.base_cases(), _head_with(**{GPU: None}), capsys=capsys)
    assert code == 0
    assert f"- **{GPU}**: skipped" in _section(out, "Only in base")[2]
    # New in head: a passing case is news, a failing one a regression.
    new = "llama-tiny/vera/train-eval-train"
    code, out, _ = _run(tmp_path, fake.base_cases(), [*fake.base_cases(), fake.case(new)], capsys=capsys)
    assert code == 0
    assert f"- **{new}**: passed, graph breaks 0" in _section(out, "Only in head")[2]
    failing = fake.case(new, "failed", breaks=[fake.brk("peft/tuners/vera/layer.py:10", "Unsupported")])
    code, out, _ = _run(tmp_path, fake.base_cases(), [*fake.base_cases(), failing], capsys=capsys)
    assert code == 1
    assert "new case outside its budget" in out
    # No base to compare: the regression names what to fix, each root at its line.
    assert "  - root `peft/tuners/vera/layer.py:10` in `forward`: Unsupported" in out


def test_chart_is_a_mermaid_xychart_of_changed_cases(tmp_path, capsys):
    head = _head_with(**{LORA: _lora_with_breaks(occurrences=3)})
    code, out, _ = _run(tmp_path, fake.base_cases(), head, "--chart", capsys=capsys)
    assert code == 1
    chart = out[out.index("```mermaid") :]
    assert chart.splitlines()[1] == "xychart-beta horizontal"
    assert f'x-axis ["{LORA}"]' in chart
    assert "bar [3]" in chart and "line [0]" in chart
    _, out, _ = _run(tmp_path, fake.base_cases(), head, capsys=capsys)
    assert "mermaid" not in out


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read the report"),
        ("{not json", "cannot read the report"),
        ('{"schema": "something-else/1", "cases": []}', "not a compile report"),
        (json.dumps({"schema": "compile-audit-report/2", "cases": {}}), "'cases' is not a list"),
        (json.dumps({"schema": "compile-audit-report/2", "cases": [{"status": "passed"}]}), "case #0"),
    ],
)
def test_bad_input_exits_2_naming_the_file(tmp_path, capsys, content, expected):
    good = fake.write(tmp_path / "good.json", fake.report(fake.base_cases()))
    bad = tmp_path / "bad-head.json"
    if content is not None:
        bad.write_text(content)
    assert diff.main([str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and expected in err


def test_runs_as_a_module_without_torch_and_writes_output(tmp_path):
    base = fake.write(tmp_path / "base.json", fake.report(fake.base_cases()))
    head = fake.write(tmp_path / "head.json", fake.report(_head_with(**{LORA: _lora_with_breaks()})))
    output = tmp_path / "summary" / "diff.md"
    # A torch that cannot be imported: the command must not need it.
    (tmp_path / "torch.py").write_text("raise ImportError('compile_audit.artifacts.diff must not import torch')\n")
    env = {"PYTHONPATH": f"{tmp_path}:{REPO_ROOT}", "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-m", "compile_audit.artifacts.diff", str(base), str(head), "--output", str(output)]
    completed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, check=False)
    assert completed.returncode == 1, completed.stderr
    assert completed.stdout == ""
    assert f"**{LORA}**: status passed -> failed" in output.read_text()


def test_nothing_audited_exits_2_even_against_itself(tmp_path, capsys):
    """A GPU run on a machine without CUDA skips every case: comparing it would pass having checked nothing."""
    skipped = [fake.case(GPU, "skipped", message="GPU tier: CUDA is not available on this machine")]
    path = fake.write(tmp_path / "gpu.json", fake.report(skipped))
    assert diff.main([str(path), str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: no case was audited (1 skipped): nothing to compare" in err
    good = fake.write(tmp_path / "good.json", fake.report(fake.base_cases()))
    assert diff.main([str(good), str(path)]) == 2


def test_new_signature_within_the_same_count_is_a_regression(tmp_path, capsys):
    """A new break that replaces an old one keeps the count; its signature still fails the diff."""
    base_case = fake.case(LOHA, breaks=[fake.brk("peft/tuners/loha/layer.py:241", fake.LOHA_REASON)])
    base_case["graph_breaks"]["signatures"] = ["peft/tuners/loha/layer.py in forward: Data-dependent branching"]
    head_case = copy.deepcopy(base_case)
    head_case["graph_breaks"]["signatures"] = ["peft/tuners/lora/layer.py in forward: Call to graph_break"]
    code, out, _ = _run(tmp_path, [base_case], [head_case], capsys=capsys)
    assert code == 1
    assert f"**{LOHA}**: 1 new signature(s)" in out
    assert "new graph break signature `peft/tuners/lora/layer.py in forward: Call to graph_break`" in out


def test_new_recompile_limit_hit_is_a_regression(tmp_path, capsys):
    base_case = fake.case(LORA)
    base_case["recompiles"]["limit_hits"] = []
    head_case = copy.deepcopy(base_case)
    hit = {"phase": "eval-1", "frame": "wrapped_func at transformers/utils/deprecation.py:121"}
    head_case["recompiles"]["limit_hits"] = [{**hit, "limit": "recompile_limit (8)", "last_guard": "10/7: not args"}]
    code, out, _ = _run(tmp_path, [base_case], [head_case], capsys=capsys)
    assert code == 1
    assert "recompile limit hit on 1 new frame(s)" in out
    assert "new recompile-limit hit in eval-1 of `wrapped_func at transformers/utils/deprecation.py:121`" in out


def test_a_case_that_raises_says_why_in_the_diff(tmp_path, capsys):
    """A crash in the test body: the exception's type and message (first in the report's message), in one line."""
    crashed = fake.case(LORA, "failed", message="KeyError: 'base_model.model.classifier.weight'\n\ndef test_...")
    code, out, _ = _run(tmp_path, fake.base_cases(), _head_with(**{LORA: crashed}), capsys=capsys)
    assert code == 1
    assert f"- **{LORA}**: status passed -> failed" in out
    assert "  - failed: KeyError: 'base_model.model.classifier.weight'" in out


def test_a_failed_verdict_names_its_first_problem(tmp_path, capsys):
    headline = f"{LORA}: graph breaks 0/0, unexpected recompiles 0/0, expected 1/any"
    message = f"{headline}\n- [eval-1] compiled eval vs eager eval logits: x"
    failed = fake.case(LORA, "failed", message=message)
    failed["headline"] = headline
    failed["problems"] = [{"kind": "check", "names": ["parity"], "held": False, "summary": message.split("- ")[1]}]
    code, out, _ = _run(tmp_path, fake.base_cases(), _head_with(**{LORA: failed}), capsys=capsys)
    assert code == 1
    assert "— \\[eval-1\\] compiled eval vs eager eval logits: x" in out


def test_compile_work_is_listed_apart_and_does_not_fail(tmp_path, capsys):
    """peft#2921: more frames compiled, the same breaks and recompiles."""
    base = _by_id(fake.base_cases())
    base[LORA]["phases"][0]["guards"] = 30
    head = copy.deepcopy(base)
    head[LORA]["phases"][0].update(frames_compiled=6, guards=40)
    code, out, _ = _run(tmp_path, list(base.values()), list(head.values()), capsys=capsys)
    assert code == 0, "compile work alone is no regression"
    work = _section(out, "Compile work")[2:]
    assert work == [f"- **{LORA}**: frames 9 -> 12 (+3; train-1 3 -> 6); guards 30 -> 40 (+10; train-1 30 -> 40)"]
    assert "### Regressions" not in out


def test_a_known_failure_that_now_fails_is_a_regression(tmp_path, capsys):
    """A known failure holds only what it names: xfailed in base, failed in head means a new problem."""
    held = fake.case(LOHA, "xfailed", message="known failure (why); today: steady state")
    base = _head_with(**{LOHA: held})
    failed = fake.case(LOHA, "failed", message=f"{LOHA}: graph breaks 9/0\n- the known failure still holds, ...")
    code, out, _ = _run(tmp_path, base, _head_with(**{LOHA: failed}), capsys=capsys)
    assert code == 1
    assert f"- **{LOHA}**: status xfailed -> failed" in out
    code, out, _ = _run(tmp_path, _head_with(**{LOHA: failed}), base, capsys=capsys)
    assert code == 0 and f"- **{LOHA}**: status failed -> xfailed" in out, "its new problem gone: better"


# ----------------------------------------------------------------------------- what the sides share

TORCHAO = "cannot import name 'LinearActivationQuantizedTensor' from 'torchao.quantization'"
TRAINABLE_TOKENS = [f"bert-tiny/trainable-tokens/{scenario}" for scenario in ("train-eval-train", "save-load")]


def _raised(case_id, error, raised="ImportError", venv="/tmp/gate-1/head/venv"):
    """A case whose test body raised before compiling anything (not audited), as the plugin records it."""
    case = fake.case(case_id, "failed", audited=False, message=f"{raised}: {error}\\n\\ntraceback ...")
    path = f"{venv}/lib/python3.11/site-packages/torchao/quantization/__init__.py"
    case.update(raised=raised, error=f"{error} ({path})")
    return case


def _failing(case_id, *problems, audited=True):
    """A case whose verdict failed with these (kind, names, summary) problems."""
    case = fake.case(case_id, "failed", audited=audited, message=f"{case_id}: graph breaks 0/0")
    case["headline"] = f"{case_id}: graph breaks 0/0"
    case["problems"] = [{"kind": k, "names": list(names), "held": False, "summary": s} for k, names, s in problems]
    return case


def test_cases_failing_alike_on_both_sides_are_no_regression_and_listed_as_not_judged(tmp_path, capsys):
    """peft#3559: base reruns the cases head failed, and each fails as on head (the same ImportError, from another
    virtualenv); nothing was audited on either side. The verdict is 'no regression', naming the library and listing
    each case with head's error; never 'nothing to compare' (exit 2)."""
    head = [_raised(case_id, TORCHAO) for case_id in TRAINABLE_TOKENS]
    base = [_raised(case_id, TORCHAO, venv="/tmp/gate-1/base/venv") for case_id in TRAINABLE_TOKENS]
    code, out, err = _run(tmp_path, base, head, capsys=capsys)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[2] == (
        "no changes; 2 case(s) fail on both sides and judge nothing of this change (2 of them cannot import"
        " `torchao` on either side: the environment's failure, not this change's)"
    )
    listed = _section(out, "Not judged")
    assert listed[0] == "### Not judged (2)"
    assert "Fail on both sides alike (2; 2 of them cannot import `torchao`" in listed[2]
    first = f"- **{TRAINABLE_TOKENS[1]}**: failed: `ImportError: {TORCHAO} (/tmp/gate-1/head/venv/"
    assert listed[4].startswith(first) and listed[4].endswith("; base failed: the same"), listed[4]


def test_a_case_failing_differently_on_base_is_a_regression(tmp_path, capsys):
    """Both sides fail, but head raises what base did not: not what the two share, so this change's regression."""
    head = [_raised(TRAINABLE_TOKENS[0], "'base_model.model.classifier.weight'", raised="KeyError")]
    base = [_raised(TRAINABLE_TOKENS[0], TORCHAO)]
    code, out, _ = _run(tmp_path, base, head, capsys=capsys)
    assert code == 1
    regression = _section(out, "Regressions")[2:5]
    assert regression[0] == f"- **{TRAINABLE_TOKENS[0]}**: fails on both sides, differently"
    assert regression[1].startswith("  - head failed: KeyError: 'base_model.model.classifier.weight'")
    assert regression[2].startswith(f"  - base failed: ImportError: {TORCHAO}")
    assert "### Not judged" not in out
    # The same exception type with another message is another failure too.
    head = [_raised(TRAINABLE_TOKENS[0], "No module named 'torchao'", raised="ImportError")]
    assert _run(tmp_path, base, head, capsys=capsys)[0] == 1


def test_a_verdict_that_fails_alike_keeps_no_problem_base_did_not_have(tmp_path, capsys):
    """Audited on both sides, the same failed check: alike, however its numbers moved. A check base did not fail is
    a new problem (the counts the same): a regression."""
    parity = ("check", ("parity",), "[eval-1] compiled vs eager logits: max abs diff 0.031")
    moved = ("check", ("parity",), "[eval-1] compiled vs eager logits: max abs diff 0.027")
    saved = ("check", ("saved adapter",), "the saved adapter does not reload")
    code, out, _ = _run(tmp_path, [_failing(LORA, parity)], [_failing(LORA, moved)], capsys=capsys)
    assert code == 0
    assert f"- **{LORA}**: failed: `{moved[2]}`; base failed: `{parity[2]}`" in _section(out, "Not judged")
    code, out, _ = _run(tmp_path, [_failing(LORA, parity)], [_failing(LORA, moved, saved)], capsys=capsys)
    assert code == 1
    assert f"- **{LORA}**: fails on both sides, differently" in _section(out, "Regressions")
    # Base failed more than head does: what head still fails, base had; the verdict improved, no regression.
    code, out, _ = _run(tmp_path, [_failing(LORA, saved, parity)], [_failing(LORA, parity)], capsys=capsys)
    assert code == 0
    # A problem the counts decide is left to the counts: "tighten the budget" (fewer breaks) is no new failure.
    tighten = ("tighten", (), "tighten the budget: graph breaks 1 < 2")
    code, out, _ = _run(tmp_path, [_failing(LORA, parity)], [_failing(LORA, parity, tighten)], capsys=capsys)
    assert code == 0 and "differently" not in out


def test_a_setup_error_on_both_sides_is_judged_by_its_first_line(tmp_path, capsys):
    """No exception type, no verdict: an error pytest reported at setup. The same first line (paths aside) is alike;
    another is a regression."""

    def setup_error(message):
        return fake.case(IA3, "error", message=message)

    base = [setup_error("ModuleNotFoundError: No module named 'torchao' (/tmp/a/venv/x.py:3)\ntraceback")]
    same = [setup_error("ModuleNotFoundError: No module named 'torchao' (/tmp/b/venv/x.py:4)\nother traceback")]
    other = [setup_error("fixture 'device' raised RuntimeError: CUDA error")]
    code, out, _ = _run(tmp_path, base, same, capsys=capsys)
    assert code == 0 and "1 case(s) fail on both sides and judge nothing of this change" in out.splitlines()[2]
    assert _run(tmp_path, base, other, capsys=capsys)[0] == 1


def test_a_regressed_verdict_names_what_it_did_not_judge_after_the_regressions(tmp_path, capsys):
    head = _head_with(**{LORA: _lora_with_breaks()})
    code, out, _ = _run(tmp_path, fake.base_cases(), head, capsys=capsys)
    assert code == 1
    assert out.splitlines()[2] == (
        "**regressed**: 1 case(s) worse, 0 better, 0 only in base, 0 only in head; not judged: 1 case(s) fail on"
        " both sides and judge nothing of this change; 1 skipped on head"
    )
    assert out.index("### Regressions") < out.index("### Not judged (2)")


def test_skipped_on_head_and_selected_cases_with_no_record_are_not_judged(tmp_path, capsys):
    """The gate compares head's failed cases with base's reruns; what head skipped, and what the selection named but
    neither side recorded (a case that never reached its audit), are listed, and the verdict says how many."""
    skipped = fake.case(GPU, "skipped", message="GPU tier: CUDA is not available on this machine")
    failing = _raised(TRAINABLE_TOKENS[0], TORCHAO)
    selected = tmp_path / "selected-cases.txt"
    selected.write_text(f"{TRAINABLE_TOKENS[0]}\n{GPU}\n{TRAINABLE_TOKENS[1]}\n", encoding="utf-8")
    code, out, _ = _run(tmp_path, [failing], [failing, skipped], "--selected", str(selected), capsys=capsys)
    assert code == 0
    assert out.splitlines()[2].endswith("; 1 skipped on head; 1 could not run (no record)")
    listed = _section(out, "Not judged")
    assert f"- **{GPU}**: GPU tier: CUDA is not available on this machine" in listed
    assert f"- **{TRAINABLE_TOKENS[1]}**" in listed
    assert "### Only in head" not in out
    assert diff.main([str(tmp_path / "base.json"), str(tmp_path / "head.json"), "--selected", "missing.txt"]) == 2
    assert "--selected: " in capsys.readouterr().err

"""A case's compile policy: settings torch does not have are refused by name, each setting holds inside the block
and is put back after it, and the gate applies the zoo's policy to the case's test and records it in the report."""

from __future__ import annotations

import json

import pytest
import torch
import torch._dynamo
from torch._inductor import config as inductor_config

from compile_audit.probe.policy import CompilePolicy, PolicyError
from compile_audit.rules.budgets import Budget
from compile_audit.rules.case import CaseAudit
from tests.selftest import toys
from tests.selftest.test_plugin import TOY_CONFTEST

pytestmark = pytest.mark.selftest
pytest_plugins = ["pytester"]


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"dynamo": {"no_such_dynamo_setting": True}}, "torch._dynamo.config has no setting 'no_such_dynamo_setting'"),
        (
            {"inductor": {"no_such_inductor_setting": 1}},
            "torch._inductor.config has no setting 'no_such_inductor_setting'",
        ),
        ({"attention": "NO_SUCH_KERNEL"}, "SDPBackend has no member 'NO_SUCH_KERNEL'"),
        ({"threads": 0}, "threads must be at least 1"),
    ],
)
def test_a_setting_torch_does_not_have_is_refused_by_name(settings, named):
    with pytest.raises(PolicyError, match=named.replace("(", r"\(")):
        CompilePolicy(**settings)


def test_every_setting_holds_in_the_block_and_is_put_back_after_it():
    cache, random, threads = (
        torch._dynamo.config.fake_tensor_cache_enabled,
        inductor_config.fallback_random,
        torch.get_num_threads(),
    )
    policy = CompilePolicy(
        dynamo={"fake_tensor_cache_enabled": not cache},
        inductor={"fallback_random": not random},
        threads=threads + 1,
    )
    with policy.applied():
        assert torch._dynamo.config.fake_tensor_cache_enabled is (not cache)
        assert inductor_config.fallback_random is (not random)
        assert torch.get_num_threads() == threads + 1
    assert torch._dynamo.config.fake_tensor_cache_enabled is cache
    assert inductor_config.fallback_random is random
    assert torch.get_num_threads() == threads


def test_the_report_holds_only_what_the_policy_sets():
    assert CompilePolicy().to_dict() == {}
    assert CompilePolicy(inductor={"fallback_random": True}, attention="MATH", threads=1).to_dict() == {
        "inductor": {"fallback_random": True},
        "attention": "MATH",
        "threads": 1,
    }
    assert CompilePolicy(dynamic=True).to_dict() == {"dynamic": True}
    for policy in (CompilePolicy(dynamic=False, threads=2), CompilePolicy()):
        assert CompilePolicy.from_dict(policy.to_dict()) == policy


@pytest.mark.parametrize(
    ("policy", "call", "recompiles"), [(True, {}, 0), (False, {}, 1), (True, {"dynamic": False}, 1)]
)
def test_an_audit_compiles_with_its_policys_dynamic_shapes_unless_the_call_names_its_own(policy, call, recompiles):
    audit = CaseAudit("toy/clean/lengths", Budget(), dynamic=policy)
    compiled = audit.compile(toys.Clean(), **call)
    for length in (2, 3):
        with audit.phase(f"call-{length}", "eval"), torch.no_grad():
            compiled(torch.randn(length, 4))
    assert len(audit.result.recompiles) == recompiles


POLICY_CONFTEST = (
    TOY_CONFTEST
    + """

from compile_audit.probe.policy import CompilePolicy


def pytest_compile_gate_policy(case, audited, config):
    return CompilePolicy(dynamo={"fake_tensor_cache_enabled": False}, threads=1, dynamic=False) if audited else None
"""
)

POLICY_TEST = """
import torch
import torch._dynamo


def test_forward(case, case_audit):
    assert torch._dynamo.config.fake_tensor_cache_enabled is False
    assert torch.get_num_threads() == 1
    compiled = case_audit.compile(torch.nn.ReLU())
    with case_audit.phase("call-1", "eval"):
        compiled(torch.ones(2, 3))
    # Static shapes, as the policy says: each new length recompiles (automatic dynamic shapes would stop after one).
    for length in (4, 5):
        with case_audit.phase(f"call-{length}", "eval", expect=("size mismatch",)):
            compiled(torch.ones(length, 3))
    assert [r.phase for r in case_audit.result.recompiles] == ["call-4", "call-5"]
"""


def test_the_gate_applies_the_zoos_policy_to_the_case_and_records_it(pytester: pytest.Pytester):
    pytester.makeconftest(POLICY_CONFTEST)
    pytester.makepyfile(test_toy=POLICY_TEST)
    pytester.makefile(".toml", compile_budgets="")
    pytester.makeini("[pytest]\ncompile_budgets = compile_budgets.toml\n")
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-k", "clean", "--compile-report=report.json")
    result.assert_outcomes(passed=1)
    (record,) = json.loads((pytester.path / "report.json").read_text())["cases"]
    assert record["policy"] == {"dynamo": {"fake_tensor_cache_enabled": False}, "threads": 1, "dynamic": False}

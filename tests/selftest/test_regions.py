"""Regional compilation: each repeated block compiled once, the rest eager; a model without one is refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from compile_audit.probe.compile_cost import CompileCostWatch
from compile_audit.probe.policy import CompilePolicy
from compile_audit.probe.recompiles import PhaseAudit
from compile_audit.probe.regions import NoRepeatedBlocks, repeated_blocks

pytestmark = pytest.mark.selftest


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.inner = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])  # a block's own list: compiled with it

    def forward(self, x):
        return self.inner[1](self.inner[0](self.linear(x).relu()))


class Stack(nn.Module):
    def __init__(self, blocks: int = 4) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 4)
        self.layers = nn.ModuleList([Block() for _ in range(blocks)])
        self.mixed = nn.ModuleList([nn.Linear(4, 4), nn.ReLU()])  # two classes: not a repeated block

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return x


def test_the_repeated_blocks_are_the_outermost_list_of_one_class():
    model = Stack()
    assert repeated_blocks(model) == list(model.layers)


def test_each_block_compiles_once_and_the_others_reuse_it():
    torch._dynamo.reset()
    model = Stack()
    audit = PhaseAudit("eager", dynamic=True, regional=True)
    assert audit.compile(model) is model  # compiled in place: the model itself runs, its blocks compiled
    with CompileCostWatch() as watch, audit.phase("first", "train") as phase:
        model(torch.randn(2, 4))
    torch._dynamo.reset()
    assert phase.frames_compiled == 1 and watch.cost.frames == 1, (phase.frames_compiled, phase.recompiles)


def test_a_model_without_repeated_blocks_is_refused_by_name():
    with pytest.raises(NoRepeatedBlocks, match=r"Linear has no nn\.ModuleList of two or more blocks of one class"):
        PhaseAudit("eager", regional=True).compile(nn.Linear(2, 2))
    with pytest.raises(NoRepeatedBlocks, match="not function"):
        PhaseAudit("eager", regional=True).compile(lambda x: x)


def test_the_policy_records_regional_and_reads_it_back():
    policy = CompilePolicy(dynamic=True, regional=True)
    assert policy.to_dict() == {"dynamic": True, "regional": True}
    assert CompilePolicy.from_dict(policy.to_dict()) == policy
    assert "regional" not in CompilePolicy(dynamic=True).to_dict()

"""Toy modules built to break, recompile or diverge on purpose. Lines tagged `# PLANTED:<name>` are
where the trouble is; the self-tests look the line number up, so editing this file cannot break them."""

from __future__ import annotations

import inspect

import torch
from torch import nn


def planted_line(name: str) -> str:
    """``tests/selftest/toys.py:<line>`` of the line tagged ``# PLANTED:<name>``."""
    lines, _ = inspect.getsourcelines(inspect.getmodule(planted_line))
    for number, line in enumerate(lines, start=1):
        if line.rstrip().endswith(f"# PLANTED:{name}"):
            return f"tests/selftest/toys.py:{number}"
    raise LookupError(name)


class Clean(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.dropout = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.linear(x)).relu()


class Prints(Clean):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        print("shape", tuple(y.shape))  # PLANTED:print
        return y.relu()


class CallsItem(Clean):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        scale = y.abs().max().item()  # PLANTED:item
        return y / (scale + 1.0)


class BranchesOnData(Clean):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if y.sum() > 0:  # PLANTED:branch
            return y.relu()
        return -y


class _WarnsOnRead:
    """A property that breaks the graph when read, as transformers 5's deprecated ``config.use_return_dict`` did."""

    @property
    def use_return_dict(self) -> bool:
        torch._dynamo.graph_break()  # PLANTED:inner-break
        return True


class RunsEagerlyAfterAttributeBreak(Clean):
    """A break inside an attribute load is one Dynamo cannot resume from: it runs this whole forward eagerly and
    compiles no graph for it (peft#3558)."""

    def __init__(self) -> None:
        super().__init__()
        self.config = _WarnsOnRead()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if self.config.use_return_dict:  # PLANTED:eager-frame
            y = y * 2
        return y.relu()


class CountsCalls(Clean):
    """A Python attribute changed in forward and used as a constant: every call recompiles."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.linear(x) * self.calls  # PLANTED:counter


class DivergesUnderCompile(Clean):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if torch.compiler.is_compiling():
            y = y + 1e-2  # PLANTED:diverge
        return y


class ScalesGradientUnderCompile(Clean):
    """Same outputs compiled and eager, but compiled the gradient is doubled (value y, derivative 2)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if torch.compiler.is_compiling():
            y = 2 * y - y.detach()  # PLANTED:scaled-gradient
        return y


class Deep(nn.Module):
    """``depth`` blocks; each block's forward is compiled separately when it carries a graph break."""

    def __init__(self, depth: int, block: type[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(block() for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


class LayerIndexed(Clean):
    """Each instance specializes on its own Python index: one more recompile of the shared code per layer."""

    instances = 0

    def __init__(self) -> None:
        super().__init__()
        LayerIndexed.instances += 1
        self.index = LayerIndexed.instances

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()  # PLANTED:per-layer
        return self.linear(x) + self.index


class TwoLinears(nn.Module):
    """Two parameter layers, so that DDP with a bucket per layer has two buckets (and Dynamo splits there)."""

    def __init__(self, planted_break: bool = False) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(4, 4), nn.Linear(4, 4)
        self.planted_break = planted_break

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.first(x).relu()
        if self.planted_break:
            torch._dynamo.graph_break()  # PLANTED:ddp-break
        return self.second(x)


class CountsMergedCalls(Clean):
    """Counts its calls on the merged path only (the IA3 plant): the guard on the count belongs to the cache entry
    compiled for the merged state, which is not the one Dynamo lists first once the unmerged entry ran again."""

    merged = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.merged:
            self.merged_calls = getattr(self, "merged_calls", 0) + 1
            return self.linear(x) * (self.merged_calls / self.merged_calls)
        return self.linear(x)


class ClassPerCall(Clean):
    """Builds a class on every call, as Cartridge's embedding does; Dynamo guards on it, and a class lives in
    reference cycles, so only the cyclic garbage collector frees it (and drops the cache entry that guarded it)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        class Proxy:  # PLANTED:class-per-call (a graph break: Dynamo cannot trace a class statement)
            scale = 2.0

        return self.linear(x) * Proxy.scale


class BreaksFirst(Clean):
    """A break as the first statement: the graph it ends is empty, so no backend sees it (only Dynamo's log)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()  # PLANTED:first-statement
        return self.linear(x).relu()


def _batch_size(x: torch.Tensor) -> int:
    torch._dynamo.graph_break()  # PLANTED:helper-first
    return x.shape[0]


class BreaksInHelperFirst(Clean):
    """A helper that breaks before any tensor operation, called first, as prompt learning's ``_get_batch_size``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = _batch_size(x)
        return self.linear(x).relu() * size


class Wraps(nn.Module):
    """An outer module whose forward only calls the inner one: a break first in the inner forward ends an empty graph
    in both frames."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)

"""The settings a case compiles under besides its backend: Dynamo's and Inductor's config, the attention kernel, the
number of intra-op threads, whether shapes compile dynamic and whether the model compiles whole or block by block
(regional). They change what is measured, so a zoo declares them
per case, the gate applies them around the test (the ``compile_gate`` plugin) and the case's report record carries
them."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch._dynamo


class PolicyError(ValueError):
    """A setting torch does not have: named, with where it was looked for."""


@dataclasses.dataclass(frozen=True)
class CompilePolicy:
    dynamo: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # torch._dynamo.config.<name> = value
    inductor: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # torch._inductor.config.<name> = value
    attention: str | None = None  # a torch.nn.attention.SDPBackend member ("MATH"); None: torch's own choice
    threads: int | None = None  # torch.set_num_threads for the test; None: the process's
    dynamic: bool | None = None  # torch.compile's dynamic= for what the case compiles; None: automatic dynamic shapes
    regional: bool = False  # each repeated block compiled once (compile_audit.probe.regions), not the whole model

    def __post_init__(self) -> None:
        for name in self.dynamo:
            if not hasattr(torch._dynamo.config, name):
                raise PolicyError(f"compile policy: torch._dynamo.config has no setting {name!r}")
        if self.inductor:
            from torch._inductor import config as inductor_config

            for name in self.inductor:
                if not hasattr(inductor_config, name):
                    raise PolicyError(f"compile policy: torch._inductor.config has no setting {name!r}")
        if self.attention is not None:
            from torch.nn.attention import SDPBackend

            if not hasattr(SDPBackend, self.attention):
                raise PolicyError(f"compile policy: torch.nn.attention.SDPBackend has no member {self.attention!r}")
        if self.threads is not None and self.threads < 1:
            raise PolicyError(f"compile policy: threads must be at least 1, not {self.threads}")

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """Every setting of the policy for the duration of the block; each is put back afterwards."""
        with contextlib.ExitStack() as stack:
            if self.dynamo:
                stack.enter_context(torch._dynamo.config.patch(**self.dynamo))
            if self.inductor:
                from torch._inductor import config as inductor_config

                stack.enter_context(inductor_config.patch(**self.inductor))
            if self.attention is not None:
                from torch.nn.attention import SDPBackend, sdpa_kernel

                stack.enter_context(sdpa_kernel(getattr(SDPBackend, self.attention)))
            if self.threads is not None:
                stack.enter_context(_threads(self.threads))
            yield

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompilePolicy:
        """The policy ``to_dict`` wrote (a rank in a fresh interpreter applies its case's policy from it)."""
        return cls(
            dynamo=dict(data.get("dynamo", {})),
            inductor=dict(data.get("inductor", {})),
            attention=data.get("attention"),
            threads=data.get("threads"),
            dynamic=data.get("dynamic"),
            regional=bool(data.get("regional", False)),
        )

    def to_dict(self) -> dict[str, Any]:
        """The report's ``policy``: only what the policy sets."""
        data: dict[str, Any] = {}
        if self.dynamo:
            data["dynamo"] = dict(sorted(self.dynamo.items()))
        if self.inductor:
            data["inductor"] = dict(sorted(self.inductor.items()))
        if self.attention is not None:
            data["attention"] = self.attention
        if self.threads is not None:
            data["threads"] = self.threads
        if self.dynamic is not None:
            data["dynamic"] = self.dynamic
        if self.regional:
            data["regional"] = True
        return data


@contextlib.contextmanager
def _threads(count: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)

"""A case id, ``model/method/scenario`` or ``model/method/scenario@device-backend``: one parser, one formatter."""

from __future__ import annotations

import dataclasses

DEFAULT_DEVICE, DEFAULT_BACKEND = "cpu", "eager"


@dataclasses.dataclass(frozen=True)
class CaseId:
    model: str
    method: str
    scenario: str
    device: str = DEFAULT_DEVICE
    backend: str = DEFAULT_BACKEND

    @classmethod
    def parse(cls, text: str) -> CaseId:
        """``llama-tiny/lora/train-eval-train@cuda-inductor``; ValueError naming the id when it has another shape."""
        path, _, where = text.partition("@")
        parts = path.split("/")
        device, _, backend = where.partition("-")
        if len(parts) != 3 or not all(parts) or (where and not (device and backend)):
            raise ValueError(f"{text!r} is no case id (model/method/scenario[@device-backend])")
        return cls(*parts, device or DEFAULT_DEVICE, backend or DEFAULT_BACKEND)

    @property
    def on_default_tier(self) -> bool:
        return (self.device, self.backend) == (DEFAULT_DEVICE, DEFAULT_BACKEND)

    @property
    def path(self) -> str:
        """``model/method/scenario``, without the tier."""
        return f"{self.model}/{self.method}/{self.scenario}"

    @property
    def without_model(self) -> str:
        """``method/scenario[@device-backend]``: what the cases of one entry for several models share."""
        return str(self).partition("/")[2]

    def __str__(self) -> str:
        if self.on_default_tier:
            return self.path
        return f"{self.path}@{self.device}-{self.backend}"

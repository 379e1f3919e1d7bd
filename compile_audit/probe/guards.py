"""Readable guard-failure reasons: which guard failed, and the user code that installed it."""

from __future__ import annotations

import dataclasses
import re

from compile_audit.frames import Guard
from compile_audit.locations import location
from compile_audit.normalize import without_ids

_ENTRY = re.compile(r"^\s*(?P<entry>[!\d/]*\d+/\d+):\s*(?P<guard>.*)$")
_STACK_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_DICT_ATTRIBUTE = re.compile(r"\.__dict__\['([^']+)'\]")
_SUBSCRIPT_ATTRIBUTE = re.compile(r"\._(?:modules|parameters|buffers)\['([^']+)'\]")
_COMPARISON = re.compile(r"\s(?:==|!=|<=|>=|<|>|is not|is)\s")
_EXPECTED_ACTUAL = re.compile(r"[.,]\s*expected\b")

# A recompile on the first train <-> eval switch is correct (dropout must go off), provided the
# failing guard is a module `training` flag or the grad/inference mode.
_MODE_GUARD = re.compile(r"grad_mode|inference_mode|is_grad_enabled|\.training\b|\btraining ==", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class GuardFailure:
    entry: str  # the cache entry whose guard failed, e.g. "0/1"
    guard: str  # the failed guard, module paths shortened
    location: str | None  # innermost user frame (outside torch/) that installed the guard

    def describe(self) -> str:
        return str(Guard(self.entry, self.guard, self.location))

    @property
    def entry_index(self) -> int:
        """The cache entry's number within its frame ("0/3" -> 3): the highest is the newest compiled."""
        number = self.entry.rpartition("/")[2]
        return int(number) if number.isdigit() else -1

    @property
    def is_mode_switch(self) -> bool:
        return bool(_MODE_GUARD.search(self.guard))

    @property
    def kind(self) -> str:
        """What is guarded, without the values it was compared with or run-specific ids:
        ``self.base.drop.training == True`` -> ``self.base.drop.training``."""
        guard = without_ids(self.guard)
        guard = _EXPECTED_ACTUAL.split(guard, 1)[0]
        return _COMPARISON.split(guard, 1)[0].strip()


def shorten_guard(guard: str) -> str:
    """``self.__dict__['_modules']['base_model']._modules['model']`` -> ``self.base_model.model``."""
    guard = guard.split("  # ", 1)[0].strip()
    guard = _SUBSCRIPT_ATTRIBUTE.sub(r".\1", guard)
    guard = guard.replace(".__dict__['_modules']", "._modules")
    guard = _SUBSCRIPT_ATTRIBUTE.sub(r".\1", guard)
    return _DICT_ATTRIBUTE.sub(r".\1", guard)


def _user_location(stack_text: str) -> str | None:
    frames = [(m["file"], int(m["line"])) for m in _STACK_FRAME.finditer(stack_text)]
    if not frames:
        return None
    outside_torch = [f for f in frames if not location(*f).startswith("torch/")]
    return location(*(outside_torch or frames)[-1])


def parse_guard_failure(reason: str) -> GuardFailure:
    """Parse one entry of ``torch._dynamo.utils.guard_failures`` (format of torch >= 2.4)."""
    text = str(reason).strip()
    first_line, _, rest = text.partition("\n")
    match = _ENTRY.match(first_line)
    entry, guard = (match["entry"], match["guard"]) if match else ("?", first_line)
    return GuardFailure(entry=entry, guard=shorten_guard(guard) or "(no reason given)", location=_user_location(rest))

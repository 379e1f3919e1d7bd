"""The text forms of what Dynamo compiled and what it guarded on, with their one parser and one formatter.

A **frame** reads ``forward at peft/tuners/lora/layer.py:712`` (function, file, first line; a report may leave out
the line). A **guard** that failed reads ``10/3: not args (guard from transformers/utils/deprecation.py:173)``
(the cache entry, the guard, where it was installed). Reports keep these strings; code that needs a field gets it
from :meth:`Frame.parse` and :meth:`Guard.parse`, never by splitting the text itself.
"""

from __future__ import annotations

import dataclasses
import re

RESUME_PREFIX = "torch_dynamo_resume_in_"  # the function Dynamo makes to resume after a break: <prefix><name>_at_<line>
_ENTRY = re.compile(r"^(?P<entry>\d+/\d+): ")
_GUARD_FROM = " (guard from "


@dataclasses.dataclass(frozen=True)
class Frame:
    function: str
    file: str = ""
    line: int | None = None

    @classmethod
    def parse(cls, text: str) -> Frame:
        """``name at file:line`` or ``name at file``; text of another shape is a function alone."""
        function, at, where = text.partition(" at ")
        if not at:
            return cls(text)
        file, colon, line = where.rpartition(":")
        if colon and line.isdigit():
            return cls(function, file, int(line))
        return cls(function, where)

    def __str__(self) -> str:
        if not self.file:
            return self.function
        return f"{self.function} at {self.file}" + (f":{self.line}" if self.line is not None else "")

    @property
    def resumes(self) -> str | None:
        """The function a resume function continues after a break; None for any other frame."""
        if not self.function.startswith(RESUME_PREFIX):
            return None
        return self.function.removeprefix(RESUME_PREFIX).rpartition("_at_")[0]

    @property
    def resumed_line(self) -> int | None:
        """The line of the break a resume function continues after (its name's ``_at_<line>``); None otherwise."""
        if self.resumes is None:
            return None
        line = self.function.rpartition("_at_")[2]
        return int(line) if line.isdigit() else None

    @property
    def own_function(self) -> str:
        """The function this frame's code belongs to: a resume function's is the one it resumes."""
        return self.resumes or self.function

    def resumes_in(self, other: Frame) -> bool:
        """Whether this frame is a resume function of ``other`` (same file)."""
        return self.resumes == other.function and self.file == other.file


@dataclasses.dataclass(frozen=True)
class Guard:
    entry: str  # the cache entry whose guard failed ("10/3"); "" where the text names none
    text: str
    location: str | None = None  # where the guard was installed (file:line)

    @classmethod
    def parse(cls, text: str) -> Guard:
        match = _ENTRY.match(text)
        entry, rest = (match["entry"], text[match.end() :]) if match else ("", text)
        if rest.endswith(")") and _GUARD_FROM in rest:
            guard, _, where = rest[:-1].rpartition(_GUARD_FROM)
            return cls(entry, guard, where)
        return cls(entry, rest)

    def __str__(self) -> str:
        where = f"{_GUARD_FROM}{self.location})" if self.location else ""
        return f"{self.entry}: {self.text}{where}" if self.entry else f"{self.text}{where}"

    def without_entry(self) -> str:
        return str(dataclasses.replace(self, entry=""))

"""Text for the budgets file that does not move with an edit: no line numbers, run ids or phase names.

Known-failure reasons are read by people in the file's diff; a reason that holds ``file.py:121`` or ``in train-12``
would change with every moved line or renamed phase, and rewrite hundreds of entries."""

from __future__ import annotations

import re

from compile_audit.normalize import without_lines

_AFTER_PHASE = re.compile(r"after phase '[^']+' a full cycle had run, yet these phases compiled again:?")
_IN_PHASE = re.compile(r" in [\w.-]+ and runs it eagerly")


def stable(text: str) -> str:
    text = _AFTER_PHASE.sub("a full cycle had run, yet later phases compiled again", text)
    return without_lines(_IN_PHASE.sub(" and runs it eagerly", text))

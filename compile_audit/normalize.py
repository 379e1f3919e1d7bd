"""Run-specific details (line numbers, compile ids, object ids, addresses) taken out of Dynamo's text,
so that the same break or guard failure reads the same in two runs."""

from __future__ import annotations

import re

_LINE_NUMBER = re.compile(r"(\.py):\d+")
# Dynamo names the frame that resumes after a break by the break's line: torch_dynamo_resume_in_forward_at_201.
_RESUME_LINE = re.compile(r"\b(torch_dynamo_resume_in_\w+?)_at_\d+\b")
_COMPILE_ID = re.compile(r"\b\d+/\d+\b")
# Object ids (id(obj), 12+ digits in CPython) and addresses; 5 digits already rule out small constants.
_ID_OR_ADDRESS = re.compile(r"0x[0-9a-fA-F]+|\b\d{5,}\b")
# An absolute path (two separators at least) names a run's own folders: its virtualenv, a temporary directory.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])(?:[A-Za-z]:)?[\\/][^\s'\"()]*[\\/][^\s'\"()]*")


def without_ids(text: str) -> str:
    return _ID_OR_ADDRESS.sub("<id>", text)


def without_paths(text: str) -> str:
    """No absolute paths: ``cannot import name 'X' from 'm' (/tmp/gate-1/venv/.../m/__init__.py)`` reads the same
    on every side and machine."""
    return _ABSOLUTE_PATH.sub("<path>", text)


def without_lines(text: str) -> str:
    """No ``file.py:LINE`` and no line in a resume function's name."""
    return _RESUME_LINE.sub(r"\1", _LINE_NUMBER.sub(r"\1", text))


def normalize(text: str) -> str:
    """No line numbers (a resume function's included), compile ids, object ids or addresses."""
    return without_ids(_COMPILE_ID.sub("<compile>", without_lines(text))).strip()

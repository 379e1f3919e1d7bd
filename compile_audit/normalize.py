"""Run-specific details (line numbers, compile ids, object ids, addresses) taken out of Dynamo's text,
so that the same break or guard failure reads the same in two runs."""

from __future__ import annotations

import re

_LINE_NUMBER = re.compile(r"(\.py):\d+")
_COMPILE_ID = re.compile(r"\b\d+/\d+\b")
# Object ids (id(obj), 12+ digits in CPython) and addresses; 5 digits already rule out small constants.
_ID_OR_ADDRESS = re.compile(r"0x[0-9a-fA-F]+|\b\d{5,}\b")


def without_ids(text: str) -> str:
    return _ID_OR_ADDRESS.sub("<id>", text)


def normalize(text: str) -> str:
    """No line numbers, compile ids, object ids or addresses."""
    return without_ids(_COMPILE_ID.sub("<compile>", _LINE_NUMBER.sub(r"\1", text))).strip()

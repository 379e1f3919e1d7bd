"""Whether ``-m`` names a marker explicitly: the end-to-end tests start fresh processes for minutes, so they run only
when asked for by name (``-m readme``, ``-m gate_e2e``), never under ``-m "not selftest"``."""

from __future__ import annotations


def selects_explicitly(expression: str | None, marker: str) -> bool:
    tokens = (expression or "").replace("(", " ( ").replace(")", " ) ").split()
    return any(token == marker and (index == 0 or tokens[index - 1] != "not") for index, token in enumerate(tokens))

"""Edits of Python source the plants share: a statement inserted first in a function's body."""

from __future__ import annotations

import ast


def first_statement(function: ast.FunctionDef) -> ast.stmt:
    """The function's first statement after its docstring (the docstring itself when it is all the body)."""
    body = function.body
    has_docstring = ast.get_docstring(function) is not None and len(body) > 1
    return body[1] if has_docstring else body[0]


def insert_first(text: str, function: ast.FunctionDef, statement: str) -> str:
    """``text`` (the source ``function`` was parsed from) with ``statement`` first in the function's body, at its
    indentation; the result is checked to compile."""
    first = first_statement(function)
    lines = text.splitlines(keepends=True)
    lines.insert(first.lineno - 1, " " * first.col_offset + statement + "\n")
    edited = "".join(lines)
    compile(edited, "<planted>", "exec")
    return edited

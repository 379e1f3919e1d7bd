"""Coverage: of the layer forwards a zoo names (function keys, ``FILE::QUALNAME``), those some case ran after its first
compile (by the footprints file), and those no case runs, each with its reason from the gaps file, a TOML file of
two tables::

    # Functions no case of this tier can run, by pattern (fnmatch over FILE::QUALNAME, the first match wins): they are
    # listed with their reason and left out of the figure.
    [gpu_only]
    "peft/tuners/*/gptq.py::*" = "GPU-only backend: GPTQ"

    # Functions this tier can run that no case runs yet, one entry each, with the reason in plain words.
    [gaps]
    "peft/tuners/lora/layer.py::_ConvNd.forward" = "no case yet: no conv model in the zoo"

The figure is covered / runnable: the functions not ``gpu_only``, and of them those some case ran. Two problems fail
the check: a runnable function no case runs that ``gaps`` does not list, and a stale ``gaps`` entry (a case runs it
now, or the package no longer has it).
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

from compile_audit.selection.footprints_file import Footprints

TABLES = ("gpu_only", "gaps")


class GapsError(ValueError):
    """A malformed gaps file; the message names the file and the entry."""


@dataclasses.dataclass(frozen=True)
class Gaps:
    gpu_only: Mapping[str, str]  # fnmatch pattern over function keys -> why no case of this tier can run it
    reasons: Mapping[str, str]  # function key -> why no case runs it yet

    def gpu_only_reason(self, key: str) -> str | None:
        return next((why for pattern, why in self.gpu_only.items() if fnmatch.fnmatchcase(key, pattern)), None)


def load_gaps(path: Path) -> Gaps:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GapsError(f"{path}: no such gaps file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise GapsError(f"{path}: unreadable gaps file: {error}") from None
    unknown = sorted(set(data) - set(TABLES))
    if unknown:
        raise GapsError(f"{path}: unknown table(s) {', '.join(unknown)}: expected {' and '.join(TABLES)}")
    tables = {name: data.get(name, {}) for name in TABLES}
    for name, table in tables.items():
        _check_table(path, name, table)
    return Gaps(gpu_only=tables["gpu_only"], reasons=tables["gaps"])


def _check_table(path: Path, name: str, table: object) -> None:
    if not isinstance(table, dict):
        raise GapsError(f'{path}: [{name}] must be a table of \'"FILE::QUALNAME" = "reason"\'')
    for key, reason in table.items():
        if "::" not in key:
            raise GapsError(f"{path}: [{name}] {key!r}: expected 'FILE::QUALNAME'")
        if not isinstance(reason, str) or not reason.strip():
            raise GapsError(f"{path}: [{name}] {key!r}: the reason must be a non-empty string")


@dataclasses.dataclass(frozen=True)
class Row:
    key: str  # FILE::QUALNAME
    cases: tuple[str, ...]  # the cases that ran it after their first compile, sorted
    reason: str | None  # why no case runs it (a gaps entry, or its gpu_only pattern's reason)
    gpu_only: bool = False

    @property
    def covered(self) -> bool:
        return bool(self.cases)

    @property
    def example(self) -> str:
        return self.cases[0] if self.cases else ""


@dataclasses.dataclass(frozen=True)
class Figure:
    covered: int
    runnable: int

    @property
    def percent(self) -> float:
        return 100.0 * self.covered / self.runnable if self.runnable else 100.0

    def __str__(self) -> str:
        return f"{self.covered} of {self.runnable} runnable layer forwards run by some case ({self.percent:.0f}%)"


def compiled_by(footprints: Footprints, key: str) -> tuple[str, ...]:
    """The cases that ran the function after their first compile (not only while building their model)."""
    return tuple(sorted(footprints.ran(key) - footprints.ran_only_building(key)))


def _is_stub_statement(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return statement.value.value is Ellipsis or isinstance(statement.value.value, str)
    if isinstance(statement, ast.Raise) and statement.exc is not None:
        raised = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
        return isinstance(raised, ast.Name) and raised.id == "NotImplementedError"
    return False


def stubs(source: str, qualnames: Iterable[str]) -> set[str]:
    """Of ``qualnames`` (``Class.method``, ``function``), those defined in ``source`` whose body does nothing but
    raise NotImplementedError (or pass, ``...``, a docstring): an abstract method no case can compile, whose edit
    changes nothing any case runs."""
    wanted, found = set(qualnames), set()

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{node.name}"
                if name in wanted and all(_is_stub_statement(statement) for statement in node.body):
                    found.add(name)

    visit(ast.parse(source).body, "")
    return found


def rows(forwards: Iterable[str], footprints: Footprints, gaps: Gaps) -> list[Row]:
    """One row per function key, sorted."""
    found = []
    for key in sorted(set(forwards)):
        gpu_reason = gaps.gpu_only_reason(key)
        reason = gpu_reason or gaps.reasons.get(key)
        found.append(Row(key, compiled_by(footprints, key), reason, gpu_only=gpu_reason is not None))
    return found


def figure(found: Iterable[Row]) -> Figure:
    runnable = [row for row in found if not row.gpu_only]
    return Figure(sum(row.covered for row in runnable), len(runnable))


def unlisted(found: Iterable[Row], gaps: Gaps) -> list[str]:
    """The runnable functions no case runs that the gaps file does not list, one message each."""
    return [
        f"not covered: {row.key}: no case runs it and the gaps file gives no reason: add a case that compiles it, or"
        f' the entry "{row.key}" = "<reason>" under [gaps]'
        for row in found
        if not row.gpu_only and not row.covered and row.key not in gaps.reasons
    ]


def stale(found: Iterable[Row], gaps: Gaps) -> list[str]:
    """The gaps entries a case now runs, or that name no layer forward of the package, one message each."""
    by_key = {row.key: row for row in found}
    messages = []
    for key in gaps.reasons:
        row = by_key.get(key)
        if row is None:
            messages.append(f"stale gap: {key}: no such layer forward in the installed package: remove its entry")
        elif row.covered:
            messages.append(
                f"stale gap: {key}: now run by {len(row.cases)} case(s), e.g. {row.example}: remove its entry"
            )
    return messages


def problems(found: list[Row], gaps: Gaps) -> list[str]:
    return unlisted(found, gaps) + stale(found, gaps)


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(found: list[Row]) -> str:
    """Two tables: the forwards some case runs (how many cases, one of them), then those none runs, with the reason."""
    lines = ["| layer forward | cases | e.g. |", "| --- | ---: | --- |"]
    lines += [f"| `{row.key}` | {len(row.cases)} | `{row.example}` |" for row in found if row.covered]
    lines += ["", "| layer forward run by no case | reason |", "| --- | --- |"]
    lines += [f"| `{row.key}` | {_escape(row.reason or '(none given)')} |" for row in found if not row.covered]
    return "\n".join(lines) + "\n"


def text(found: list[Row]) -> str:
    """One line per function: its cases and one of them, or its reason."""
    width = max((len(row.key) for row in found), default=0)
    return "\n".join(
        f"{row.key:<{width}}  {len(row.cases):>5}  {row.example}"
        if row.covered
        else f"{row.key:<{width}}      -  {row.reason or '(no reason given)'}"
        for row in found
    )

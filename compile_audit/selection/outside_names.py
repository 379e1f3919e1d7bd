"""Every identifier spelled by code outside the package under test that a case runs: the installed libraries (torch,
transformers, ...) and the suite's own code beside this package.

A method or class attribute added to a class that existed changes what such code does only where something looks
its name up: the package's own code (the selection reads it), or this outside code, which no footprint records (torch
calling ``self.extra_repr()``, a scenario calling ``model.merge_adapter()``, ``getattr(module, "weight")``,
``PeftModel.__getattr__`` forwarding a name to the base model). Code outside looks a name up on an object it was
handed only by spelling it after a dot or in a string (``getattr``, ``hasattr``, ``methodcaller``); a bare name, a
definition or a keyword argument there is that code's own. So a library counts every word that follows a dot or is a
whole string literal (read from its source text, wherever it stands: in a comment, a string, generated code); the
suite's own files, small, are parsed: their attributes and the identifier-like words of their strings, comments
left out.
"""

from __future__ import annotations

import ast
import re
import sysconfig
from collections.abc import Iterable
from pathlib import Path

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A word after a dot (``obj.name``, ``"x.name"``) or a whole quoted identifier (``getattr(obj, "name")``)
_LOOKUP = re.compile(r"\.\s*([A-Za-z_][A-Za-z0-9_]*)|[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']")
# The folder holding compile_audit: the suite's zoo, plugin and tests sit beside it.
SUITE_ROOT = Path(__file__).resolve().parents[2]
# Beside the code a case runs: outputs, builds, and the tools and scripts that only start runs.
_NOT_CASE_CODE = frozenset({"out", "build", "dist", "venv", "gate_tools", "scripts", "docs", "results"})


def site_folders() -> list[Path]:
    """The interpreter's library folders (pure and platform-specific), each once."""
    paths = sysconfig.get_paths()
    return [Path(p) for p in dict.fromkeys((paths["purelib"], paths["platlib"])) if Path(p).is_dir()]


def suite_files(root: Path = SUITE_ROOT) -> list[Path]:
    """The suite's code a case runs: its top-level modules (``conftest.py``) and its folders' (the zoo, the plugin,
    the tests), but hidden ones, outputs and the tools."""
    if not root.is_dir():
        return []
    files = sorted(root.glob("*.py"))
    for folder in sorted(root.iterdir()):
        if folder.is_dir() and not folder.name.startswith(".") and folder.name not in _NOT_CASE_CODE:
            files += sorted(folder.rglob("*.py"))
    return files


def spelled_outside(
    package: str,
    libraries: Iterable[str] = (),
    sites: Iterable[Path] | None = None,
    suite: Iterable[Path] | None = None,
) -> frozenset[str] | None:
    """The names the Python source in ``sites`` (the interpreter's by default) but ``package``'s own may look up on
    an object (after a dot, or a whole string), and the attributes and string words of the ``suite`` files (their
    comments left out). None where one of ``libraries`` (those the footprints were recorded with) is not there: what
    the cases ran outside the package is then unknown."""
    sites = site_folders() if sites is None else list(sites)
    suite = suite_files() if suite is None else list(suite)
    present = {p.name for site in sites if site.is_dir() for p in site.iterdir()}
    if any(library not in present for library in libraries):
        return None
    words: set[str] = set()
    for site in sites:
        for entry in site.iterdir():
            if entry.name == package or entry.name.startswith(f"{package}-"):
                continue
            for path in [entry] if entry.suffix == ".py" else entry.rglob("*.py") if entry.is_dir() else []:
                words.update(a or b for a, b in _LOOKUP.findall(_text(path)))
    for path in suite:
        words |= _identifiers(path)
    return frozenset(words)


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _identifiers(path: Path) -> set[str]:
    """The attributes and identifier-like words of the strings of a file; every word where it does not parse."""
    text = _text(path)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return set(_WORD.findall(text))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.update(a or b for a, b in _LOOKUP.findall(repr(node.value)) if len(node.value) < 200)
    return found

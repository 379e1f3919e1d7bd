"""Every identifier spelled by code outside the package under test that a case runs: the installed libraries (torch,
transformers, ...) and the suite's own code beside this package.

A method added to a class that existed changes what such code does only where something looks its name up: the
package's own code (the selection reads it), or this outside code, which no footprint records (torch calling
``extra_repr``, a scenario calling ``model.merge_adapter()``, ``PeftModel.__getattr__`` forwarding a name to the
base model). A name no outside source spells, anywhere, cannot be looked up from there. Every word of the source
counts, not only attribute reads: a larger set keeps more cases, never fewer.
"""

from __future__ import annotations

import re
import sysconfig
from collections.abc import Iterable
from pathlib import Path

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The folder holding compile_audit: the suite's zoo, plugin and tests sit beside it.
SUITE_ROOT = Path(__file__).resolve().parents[2]
_NOT_SUITE_CODE = frozenset({"out", "build", "dist", "venv", ".venv", "__pycache__"})


def site_folders() -> list[Path]:
    """The interpreter's library folders (pure and platform-specific), each once."""
    paths = sysconfig.get_paths()
    return [Path(p) for p in dict.fromkeys((paths["purelib"], paths["platlib"])) if Path(p).is_dir()]


def suite_folders(root: Path = SUITE_ROOT) -> list[Path]:
    """The suite's code: the folders beside this package, but outputs, builds and hidden ones."""
    if not root.is_dir():
        return []
    return [
        p for p in sorted(root.iterdir()) if p.is_dir() and not p.name.startswith(".") and p.name not in _NOT_SUITE_CODE
    ]


def spelled_outside(
    package: str,
    libraries: Iterable[str] = (),
    sites: Iterable[Path] | None = None,
    suite: Iterable[Path] | None = None,
) -> frozenset[str] | None:
    """Every word of the Python source in ``sites`` (the interpreter's by default) but ``package``'s own, and in
    ``suite``. None where one of ``libraries`` (those the footprints were recorded with) is not there: what the
    cases ran outside the package is then unknown."""
    sites = site_folders() if sites is None else list(sites)
    suite = suite_folders() if suite is None else list(suite)
    present = {p.name for site in sites if site.is_dir() for p in site.iterdir()}
    if any(library not in present for library in libraries):
        return None
    words: set[str] = set()
    for site in sites:
        for folder in site.iterdir():
            if folder.name == package or folder.name.startswith(f"{package}-"):
                continue
            words |= _words_under(folder)
    for folder in suite:
        words |= _words_under(folder)
    return frozenset(words)


def _words_under(folder: Path) -> set[str]:
    files = [folder] if folder.suffix == ".py" else folder.rglob("*.py") if folder.is_dir() else []
    words: set[str] = set()
    for path in files:
        try:
            words.update(_WORD.findall(path.read_text(encoding="utf-8", errors="replace")))
        except OSError:
            continue
    return words

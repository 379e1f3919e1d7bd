"""The checkout of this repository that the tools run: its ``tests/``, ``conftest.py`` and budgets, which an installed
package does not carry.

In a checkout or an editable install it is the directory above this package; otherwise (``pip install .``) the
current directory, when it is such a checkout.
"""

from __future__ import annotations

from pathlib import Path

MARKERS = ("pyproject.toml", "conftest.py", "tests/cases.py")
NOT_FOUND = (
    "not run from a checkout of the compile gate (the tools run its tests/): run it from the checkout's root, "
    "or install the checkout editable (pip install -e .)"
)


def is_checkout(path: Path) -> bool:
    return all((path / marker).is_file() for marker in MARKERS)


def find(cwd: Path | None = None) -> Path | None:
    """The checkout's root, or None when neither this package's parent nor the current directory is one."""
    for candidate in (Path(__file__).resolve().parents[1], (cwd or Path.cwd()).resolve()):
        if is_checkout(candidate):
            return candidate
    return None

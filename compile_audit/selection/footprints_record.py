"""The footprints file written from compile reports (``change_selection record``), with what the package defined
and ran at import (``change_selection inventory``: :mod:`compile_audit.selection.package_inventory`)."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from compile_audit.files import write_text_atomic
from compile_audit.selection import package_inventory
from compile_audit.selection.footprints_file import Footprints, FootprintsError, from_reports, load, merged


def package_root(root: Path | None, package: str) -> Path:
    """The folder holding the package (default: where it is installed, found without importing it)."""
    if root is not None:
        return root
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FootprintsError(f"{package} is not installed here: pass --source (the folder holding {package}/)")
    return Path(next(iter(spec.submodule_search_locations))).parent


def source_reader(root: Path, package: str) -> Callable[[str], str | None]:
    """Reads ``peft/x.py`` from the folder holding the package."""

    def read(path: str) -> str | None:
        try:
            return (root / path).read_text(encoding="utf-8")
        except OSError:
            return None

    return read


def record(reports: Sequence[Path], output: Path, source: Path | None = None) -> int:
    loaded = []
    for path in reports:
        try:
            loaded.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError) as error:
            raise FootprintsError(f"{path}: unreadable compile report: {error}") from None
    packages = {
        path.split("/", 1)[0]
        for report in loaded
        for record in report.get("cases", [])
        for field in ("footprint", "footprint_lines")
        for path in (record.get(field) or {})
    }
    package = packages.pop() if len(packages) == 1 else None
    lines = any(record.get("footprint_lines") for report in loaded for record in report.get("cases", []))
    root = None
    if package:
        try:
            root = package_root(source, package)
        except FootprintsError as error:
            if lines:  # the statements the cases ran are read from that source
                raise
            print(f"note: no inventory of the package (a function no case ran stays unknown): {error}", file=sys.stderr)
    new = from_reports(loaded, source_reader(root, package) if root and lines else None)
    if not new.cases:
        raise FootprintsError(f"{', '.join(map(str, reports))}: no case with a footprint")
    if root and package:
        new = with_inventory(new, root, package)
    result = merged(load(output), new) if output.exists() else new
    write_text_atomic(output, result.to_json())
    print(
        f"{output}: {len(new.cases)} case(s) recorded, {len(result.cases)} in all, {len(result.runs)} functions,"
        f" {len(result.statements)} of them narrowed to statements"
    )
    return 0


def with_inventory(footprints: Footprints, root: Path, package: str) -> Footprints:
    """The footprints with what the package at ``root`` defines and runs at import (package_inventory)."""
    defined = package_inventory.defined(root, package)
    at_import, failed = package_inventory.run_at_import(root, package, defined)
    for module in failed:
        print(f"note: {module} did not import: what it runs at import is unknown", file=sys.stderr)
    return dataclasses.replace(footprints, defined=defined, at_import=at_import)


def inventory(output: Path, source: Path | None) -> int:
    footprints = load(output)
    package = next(iter({key.split("/", 1)[0] for key in footprints.runs}), None)
    if package is None:
        raise FootprintsError(f"{output}: no function recorded, so no package to list")
    root = package_root(source, package)
    recorded, here = footprints.versions.get(package), installed_version(root, package)
    if recorded and here != recorded:
        raise FootprintsError(
            f"{output}: recorded on {package} {recorded}, but {root / package} is {here or 'of no known version'}:"
            f" list the version the cases ran (--source)"
        )
    result = with_inventory(footprints, root, package)
    write_text_atomic(output, result.to_json())
    print(
        f"{output}: {len(result.defined or ())} functions defined, {len(result.at_import)} run at import,"
        f" {len(result.elsewhere)} case(s) with processes of their own"
    )
    return 0


def installed_version(root: Path, package: str) -> str | None:
    """The version string a package's ``__init__.py`` binds, read from its source."""
    match = re.search(r"^__version__\s*=\s*[\"']([^\"']+)[\"']", _text_of(root / package / "__init__.py"), re.M)
    return match.group(1) if match else None


def _text_of(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""

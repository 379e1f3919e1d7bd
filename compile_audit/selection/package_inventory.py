"""What the package under test held when its footprints were recorded: the functions its files define, and those
that ran while it was imported.

A function that no recorded case ran is either one no case runs or one the footprints never saw (written after they
were recorded). Listing what the package defined tells the two apart. Importing runs code no case's footprint holds
(a registration call, a decorator, a class instantiated at module level): those functions are listed too, so that a
change to one is known to reach every case.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from compile_audit.selection.code_changes import UnparsableSource, parse_module
from compile_audit.selection.footprints_file import FootprintsError, function_key

# Imports the package and each of its modules under a profiler, and prints the functions of the package that ran.
_IMPORT_TRACE = """
import importlib, json, os, pkgutil, sys, threading
root, package = sys.argv[1], sys.argv[2]
sys.path.insert(0, root)
prefix = os.path.join(os.path.realpath(root), package) + os.sep
ran = set()
def profile(frame, event, arg):
    if event == "call" and frame.f_code.co_filename.startswith(prefix):
        ran.add((frame.f_code.co_filename[len(prefix):], frame.f_code.co_qualname))
sys.setprofile(profile)
threading.setprofile(profile)
top = importlib.import_module(package)
failed = []
for module in pkgutil.walk_packages(top.__path__, package + ".", onerror=lambda name: failed.append(name)):
    try:
        importlib.import_module(module.name)
    except Exception as error:
        failed.append(f"{module.name}: {type(error).__name__}")
sys.setprofile(None)
threading.setprofile(None)
print(json.dumps({"ran": sorted(ran), "failed": failed}))
"""


def defined(root: Path, package: str) -> frozenset[str]:
    """The key of every function the package's files define (a file that does not parse: none of its)."""
    found: set[str] = set()
    for path in sorted((root / package).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        relative = path.relative_to(root).as_posix()
        try:
            module = parse_module(relative, path.read_text(encoding="utf-8", errors="replace"))
        except UnparsableSource:
            continue
        found |= {function_key(relative, qualname) for qualname in module.functions}
    return frozenset(found)


def run_at_import(root: Path, package: str, functions: frozenset[str]) -> tuple[frozenset[str], list[str]]:
    """Of ``functions``, those that importing the package and every module of it runs (in a fresh interpreter),
    and the modules that did not import (what they ran before failing counts)."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_TRACE, str(root), package], capture_output=True, text=True, check=False
    )
    try:
        data = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise FootprintsError(
            f"importing {package} from {root} to list what runs at import failed:\n{done.stderr[-2000:]}"
        ) from None
    ran = {function_key(f"{package}/{Path(file).as_posix()}", qualname) for file, qualname in data["ran"]}
    return frozenset(ran & functions), list(data["failed"])

"""A PEFT pull request that adds a method, planted in a PEFT source tree: a copy of an existing tuner package under a
new name, registered as a contributor would (its package, ``register_peft_method``, a ``PeftType`` member, a
target-module mapping, the exports), optionally with a graph break as the first statement of its layer's forward.

    python -m tests.tools.new_method SRC/peft --copy hra --name hracopy [--graph-break]
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
from pathlib import Path

from tests.tools.source_edits import insert_first

PLANTED = "torch._dynamo.graph_break()  # PLANTED: a new method's forward breaks"


def _rename(text: str, old: str, new: str) -> str:
    """The copied package's names: ``HRAConfig`` -> ``HRACOPYConfig``, ``PeftType.HRA``, its mapping, ``hra_`` and
    ``"hra"``."""
    text = re.sub(rf"(?<![A-Za-z0-9]){old.upper()}(?=[A-Z_a-z]|\b)", new.upper(), text)
    text = text.replace(f"TRANSFORMERS_MODELS_TO_{old.upper()}_", f"TRANSFORMERS_MODELS_TO_{new.upper()}_")
    text = re.sub(rf"(?<![A-Za-z0-9]){old}_", f"{new}_", text)
    return text.replace(f'"{old}"', f'"{new}"')


def _insert_after(path: Path, anchor: str, line: str) -> None:
    text = path.read_text(encoding="utf-8")
    if anchor not in text:
        raise ValueError(f"{path}: no {anchor!r} to add {line!r} after: the plant needs updating")
    index = text.index(anchor) + len(anchor)
    end = text.index("\n", index) + 1
    path.write_text(text[:end] + line + "\n" + text[end:], encoding="utf-8")


def _plant_break(layer_py: Path, class_name: str) -> None:
    text = layer_py.read_text(encoding="utf-8")
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            forward = next(f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "forward")
            layer_py.write_text(insert_first(text, forward, PLANTED), encoding="utf-8")
            return
    raise ValueError(f"{layer_py}: no class {class_name} with a forward: the plant needs updating")


def add_method(peft_dir: Path, copy: str, name: str, *, graph_break: bool = False, linear: str = "") -> None:
    """Add ``name``, a copy of the tuner ``copy``, to the PEFT package at ``peft_dir`` (``.../src/peft``)."""
    old, new = copy.upper(), name.upper()
    target = peft_dir / "tuners" / name
    shutil.copytree(peft_dir / "tuners" / copy, target, ignore=shutil.ignore_patterns("__pycache__"))
    for path in target.glob("*.py"):
        path.write_text(_rename(path.read_text(encoding="utf-8"), copy, name), encoding="utf-8")
    _insert_after(peft_dir / "utils" / "peft_types.py", f'    {old} = "{old}"', f'    {new} = "{new}"')
    with (peft_dir / "utils" / "constants.py").open("a", encoding="utf-8") as constants:
        mapping = "TRANSFORMERS_MODELS_TO_{}_TARGET_MODULES_MAPPING"
        constants.write(f"\n{mapping.format(new)} = dict({mapping.format(old)})\n")
    for reexport in (peft_dir / "utils" / "other.py", peft_dir / "utils" / "__init__.py"):  # other.py re-exports
        _insert_after(reexport, f"    {mapping.format(old)},", f"    {mapping.format(new)},")
        _insert_after(reexport, f'    "{mapping.format(old)}",', f'    "{mapping.format(new)}",')
    exported = [f"{new}Config", f"{new}Model"]
    tuners_init = peft_dir / "tuners" / "__init__.py"
    _insert_after(tuners_init, f"from .{copy} import", f"from .{name} import {', '.join(exported)}")
    for init in (tuners_init, peft_dir / "__init__.py"):
        _insert_after(init, f'    "{old}Config",', "\n".join(f'    "{e}",' for e in exported))
    _insert_after(peft_dir / "__init__.py", f"    {old}Config,", "\n".join(f"    {e}," for e in exported))
    if graph_break:
        _plant_break(target / "layer.py", linear or f"{new}Linear")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("peft_dir", type=Path, help="the peft package folder (src/peft of a source tree)")
    parser.add_argument("--copy", default="hra", help="the tuner package to copy")
    parser.add_argument("--name", default="hracopy", help="the new method's package name")
    parser.add_argument("--graph-break", action="store_true", help="a break first in its Linear layer's forward")
    args = parser.parse_args()
    add_method(args.peft_dir, args.copy, args.name, graph_break=args.graph_break)


if __name__ == "__main__":
    main()

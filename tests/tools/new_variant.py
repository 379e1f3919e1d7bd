"""A PEFT pull request that adds a LoRA variant, planted in a PEFT source tree the way PEFT's recent variants came
(KaSA, MiCA, VeLoRA): a ``LoraConfig`` field whose metadata says ``is_lora_variant``, a variant class copied from an
existing one under a new name, and an entry in ``Linear.lora_variants``; optionally a graph break as the first
statement of the new class's forward.

    python -m tests.tools.new_variant SRC/peft --copy MiCALinearVariant --field use_newvar [--graph-break]
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from tests.tools.source_edits import insert_first

PLANTED = "torch._dynamo.graph_break()  # PLANTED: a new LoRA variant's forward breaks"
# The anchors in peft/tuners/lora: the last variant field of LoraConfig and Linear's last lora_variants entry.
CONFIG_ANCHOR = "    kasa_config: Optional[KasaConfig] = field("
VARIANTS_ANCHOR = '            ("kasa_config",): variants.KasaLinearVariant,\n'


def _class_source(text: str, name: str) -> tuple[str, ast.ClassDef]:
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            lines = text.splitlines(keepends=True)
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return "".join(lines[start - 1 : node.end_lineno]), node
    raise ValueError(f"no class {name} in peft/tuners/lora/variants.py: the plant needs updating")


def _with_break(source: str) -> str:
    """``source`` (a class) with a graph break first in its forward."""
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef))
    forward = next(f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "forward")
    return insert_first(source, forward, PLANTED)


def _replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    if old not in text:
        raise ValueError(f"{path}: no {old.strip()!r}: the plant needs updating")
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def add_variant(peft_dir: Path, copy: str, field: str, *, graph_break: bool = False) -> str:
    """Add a LoRA variant switched on by the bool ``field``, its Linear class a copy of ``copy``; returns the new
    class's name."""
    lora = peft_dir / "tuners" / "lora"
    class_name = "".join(part.title() for part in field.removeprefix("use_").split("_")) + "LinearVariant"
    variants = lora / "variants.py"
    source, _ = _class_source(variants.read_text(encoding="utf-8"), copy)
    source = source.replace(f"class {copy}(", f"class {class_name}(", 1)
    if graph_break:
        source = _with_break(source)
    with variants.open("a", encoding="utf-8") as out:
        out.write("\n\n" + source)
    declared = (
        f"    {field}: bool = field(\n        default=False,\n"
        f'        metadata={{"help": "Enable the {class_name} LoRA variant.", "is_lora_variant": True}},\n    )\n'
    )
    _replace_once(lora / "config.py", CONFIG_ANCHOR, declared + CONFIG_ANCHOR)
    _replace_once(
        lora / "layer.py", VARIANTS_ANCHOR, VARIANTS_ANCHOR + f'            ("{field}",): variants.{class_name},\n'
    )
    return class_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("peft_dir", type=Path, help="the peft package folder (src/peft of a source tree)")
    parser.add_argument("--copy", default="MiCALinearVariant", help="the variant class to copy")
    parser.add_argument("--field", default="use_newvar", help="the new LoraConfig field (a bool)")
    parser.add_argument("--graph-break", action="store_true", help="a break first in the new class's forward")
    args = parser.parse_args()
    print(add_variant(args.peft_dir, args.copy, args.field, graph_break=args.graph_break))


if __name__ == "__main__":
    main()

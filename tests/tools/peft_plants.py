"""A PEFT release's source with regressions planted (or real fixes undone): how a pull request looks to the gate.

    python -m tests.tools.peft_plants out/plants/shira-ia3 --plant shira-break --plant ia3-merged-recompile
    scripts/gate --base peft==0.21.2 --head out/plants/shira-ia3 --out out/gate-shira-ia3

The sdist of ``--version`` (default: the installed peft) is downloaded and extracted into DEST, then each plant's
edits are applied; an edit whose text is not found is an error naming the plant and the file. ``undo-3183`` reverses
peft#3183 from a clone of PEFT's repository (``--peft-repo``).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.metadata
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tests.tools.source_edits import insert_first

BREAK = "torch._dynamo.graph_break()  # PLANTED"
FORWARD = "    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:\n"
BASE_CALL = "            result = self.base_layer(x, *args, **kwargs)\n"
MERGED = "        elif self.merged:\n"


@dataclasses.dataclass(frozen=True)
class Edit:
    path: str  # inside src/
    old: str
    new: str


PLANTS: dict[str, tuple[Edit, ...]] = {
    # Executes nothing differently: a docstring, a comment, an annotation.
    "docstring-only": (
        Edit(
            "peft/peft_model.py",
            "    Base model encompassing various Peft methods.\n",
            "    Base model encompassing various Peft methods, wrapping a transformers model.\n",
        ),
        Edit("peft/tuners/lora/layer.py", "    # Lora implemented in a dense layer\n", "    # LoRA on nn.Linear\n"),
        Edit(
            "peft/tuners/ia3/layer.py",
            "    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:\n"
            "        dtype = previous_dtype = x.dtype\n        if self.disable_adapters:",
            "    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:  # the IA3 scaling\n"
            "        dtype = previous_dtype = x.dtype\n        if self.disable_adapters:",
        ),
    ),
    "shira-break": (
        Edit(
            "peft/tuners/shira/layer.py",
            f"{FORWARD}        if self.disable_adapters:",
            f"{FORWARD}        {BREAK}\n        if self.disable_adapters:",
        ),
    ),
    # A forward that waits forever in eval mode (a lock, a download that never returns): the case hangs.
    "ia3-eval-hang": (
        Edit(
            "peft/tuners/ia3/layer.py",
            "    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:\n"
            "        dtype = previous_dtype = x.dtype\n        if self.disable_adapters:",
            "    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:\n"
            "        dtype = previous_dtype = x.dtype\n"
            '        if not self.training:\n            __import__("threading").Event().wait()  # PLANTED: hangs\n'
            "        if self.disable_adapters:",
        ),
    ),
    # A forward whose process dies (as a segfaulting kernel or the out-of-memory killer would end it).
    "shira-exit": (
        Edit(
            "peft/tuners/shira/layer.py",
            f"{FORWARD}        if self.disable_adapters:",
            f'{FORWARD}        __import__("os")._exit(3)  # PLANTED: the process dies\n'
            "        if self.disable_adapters:",
        ),
    ),
    # An int attribute bumped on each merged call: Dynamo guards on its value, so every call recompiles.
    "ia3-merged-recompile": (
        Edit(
            "peft/tuners/ia3/layer.py",
            f"{MERGED}{BASE_CALL}        else:\n            ia3_scaling = 1",
            f"{MERGED}            self.merged_calls = getattr(self, 'merged_calls', 0) + 1  # PLANTED\n"
            "            result = self.base_layer(x, *args, **kwargs) * (1 + 0 * self.merged_calls)\n"
            "        else:\n            ia3_scaling = 1",
        ),
    ),
    "vera-disabled-break": (
        Edit(
            "peft/tuners/vera/layer.py",
            f"                self.unmerge()\n{BASE_CALL}{MERGED}",
            f"                self.unmerge()\n{BASE_CALL}            {BREAK}\n{MERGED}",
        ),
    ),
    "oft-merged-break": (
        Edit(
            "peft/tuners/oft/layer.py",
            f"{MERGED}{BASE_CALL}        else:\n            for active_adapter in self.active_adapters:\n"
            "                if active_adapter not in self.oft_R",
            f"{MERGED}{BASE_CALL}            {BREAK}\n"
            "        else:\n            for active_adapter in self.active_adapters:\n"
            "                if active_adapter not in self.oft_R",
        ),
    ),
    # peft#3558 undone: PeftModel.forward reads the deprecated config.use_return_dict (a logging call under Dynamo).
    "undo-3558": (
        Edit(
            "peft/peft_model.py",
            "return_dict = return_dict if return_dict is not None else _get_return_dict_transformers_v4(self.config)",
            "return_dict = return_dict if return_dict is not None else self.config.use_return_dict",
        ),
    ),
    # peft#2611 undone: the same-shape hot-swap assigns the new storage instead of copying into the old.
    "undo-2611": (
        Edit(
            "peft/utils/hotswap.py",
            "            old_val.data.copy_(new_val.data)\n",
            "            old_val.data = new_val.data\n",
        ),
    ),
    # peft#3241 undone: the padded layers prepare_model_for_compiled_hotswap makes keep torch's requires_grad=True.
    "undo-3241": (
        Edit("peft/utils/hotswap.py", "    new_layer.weight.requires_grad_(lora_module.weight.requires_grad)\n", ""),
        Edit("peft/utils/hotswap.py", "    new_layer.weight.requires_grad_(lora_module.weight.requires_grad)\n", ""),
    ),
    # peft#2177's tensor scalings undone: prepare_model_for_compiled_hotswap leaves each LoRA scaling a Python float,
    # a constant Dynamo guards on, so a swap to an adapter of another alpha / rank recompiles.
    "undo-2177-scalings": (
        Edit(
            "peft/utils/hotswap.py",
            "                scaling[key] = torch.tensor(val, device=module.weight.device)\n",
            "                scaling[key] = val  # PLANTED: left a Python float\n",
        ),
    ),
    # peft#2962 undone: injecting from a state dict matches module names with the compiled wrapper's _orig_mod. prefix.
    "undo-2962": (
        Edit(
            "peft/tuners/tuners_utils.py",
            'module_names = {k.rsplit("." + prefix, 1)[0].removeprefix("_orig_mod.") for k in state_dict}',
            'module_names = {k.rsplit("." + prefix, 1)[0] for k in state_dict}',
        ),
        Edit("peft/tuners/tuners_utils.py", '                key = key.removeprefix("_orig_mod.")\n', ""),
    ),
    # peft#2416 undone: LoRA's forward skips the multiplication when scaling == 1 (a branch on the scaling).
    "undo-2416": (
        Edit(
            "peft/tuners/lora/layer.py",
            "                if active_adapter not in self.lora_variant:  # vanilla LoRA\n"
            "                    result = result + lora_B(lora_A(dropout(x))) * scaling\n",
            "                if active_adapter not in self.lora_variant and scaling == 1:  # PLANTED\n"
            "                    result = result + lora_B(lora_A(dropout(x)))\n"
            "                elif active_adapter not in self.lora_variant:  # vanilla LoRA\n"
            "                    result = result + lora_B(lora_A(dropout(x))) * scaling\n",
        ),
    ),
    # Build-time code only (LoraLayer.update_layer, which most cases run only while building their model): the same
    # model written another way, then a model built differently (Dropout(p=0.0) where Identity was).
    "lora-build-refactor": (
        Edit(
            "peft/tuners/lora/layer.py",
            "        if lora_dropout > 0.0:\n            lora_dropout_layer = nn.Dropout(p=lora_dropout)\n"
            "        else:\n            lora_dropout_layer = nn.Identity()\n",
            "        lora_dropout_layer = nn.Dropout(p=lora_dropout) if lora_dropout > 0.0 else nn.Identity()\n",
        ),
    ),
    "lora-build-change": (
        Edit(
            "peft/tuners/lora/layer.py",
            "        if lora_dropout > 0.0:\n            lora_dropout_layer = nn.Dropout(p=lora_dropout)\n"
            "        else:\n            lora_dropout_layer = nn.Identity()\n",
            "        lora_dropout_layer = nn.Dropout(p=lora_dropout)\n",
        ),
    ),
}


@dataclasses.dataclass(frozen=True)
class BreakAt:
    """A graph break as the first statement of a function (after its docstring), found by its qualified name."""

    path: str  # inside src/
    qualname: str  # "Class.method" or "function"


# The layer forwards no case compiled before the zoo had convolutions, nn.MultiheadAttention, MoE experts, embeddings of
# every method and LoRA's variants: one of each kind, a break at the top of each.
UNCOVERED_FORWARDS = (
    BreakAt("peft/tuners/lora/variants.py", "KasaLinearVariant.forward"),
    BreakAt("peft/tuners/lora/variants.py", "VeloraLinearVariant.forward"),
    BreakAt("peft/tuners/lora/variants.py", "MiCAEmbeddingVariant.forward"),
    BreakAt("peft/tuners/lora/variants.py", "DoraEmbeddingVariant.forward"),
    BreakAt("peft/tuners/lora/layer.py", "_ConvNd.forward"),
    BreakAt("peft/tuners/ia3/layer.py", "_ConvNd.forward"),
    BreakAt("peft/tuners/oft/layer.py", "Conv2d.forward"),
    BreakAt("peft/tuners/hra/layer.py", "HRAConv2d.forward"),
    BreakAt("peft/tuners/lora/layer.py", "MultiheadAttention.forward"),
    BreakAt("peft/tuners/lora/layer.py", "ParamWrapper.forward"),
    BreakAt("peft/tuners/oft/layer.py", "Embedding.forward"),
    BreakAt("peft/tuners/hira/layer.py", "Embedding.forward"),
    BreakAt("peft/tuners/tinylora/layer.py", "Embedding.forward"),
)
BREAKS_AT: dict[str, tuple[BreakAt, ...]] = {"uncovered-forwards-break": UNCOVERED_FORWARDS}
UPSTREAM_COMMITS = {"undo-3183": ("15af19751a0a960a4e4f1847a4b5dee0f801e0aa", "src/peft/utils/hotswap.py")}


class PlantError(Exception):
    pass


def download_source(version: str, dest: Path) -> Path:
    with tempfile.TemporaryDirectory() as downloads:
        pip = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "--dest", downloads]
        done = subprocess.run([*pip, f"peft=={version}"], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise PlantError(f"pip download peft=={version} failed: {done.stderr.strip().splitlines()[-1:]}")
        (archive,) = Path(downloads).glob("peft-*.tar.gz")
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        with tarfile.open(archive) as tar:
            tar.extractall(downloads, **safe)
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(Path(downloads) / archive.name.removesuffix(".tar.gz"), dest)
    return dest


# A pull request that adds a method: HRA copied as HRACOPY (tests/tools/new_method.py), with or without a break.
NEW_METHODS = {"new-method": False, "new-method-break": True}
# A pull request that adds a LoRA variant, a copy of MiCA's Linear class (tests/tools/new_variant.py).
NEW_VARIANTS = {"new-variant": False, "new-variant-break": True}


def _function(tree: ast.Module, qualname: str) -> ast.FunctionDef | None:
    scope: list[ast.stmt] = tree.body
    found = None
    for name in qualname.split("."):
        found = next(
            (node for node in scope if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name == name), None
        )
        if found is None:
            return None
        scope = found.body
    return found if isinstance(found, ast.FunctionDef) else None


def break_at(source: Path, where: BreakAt) -> None:
    """Insert a graph break as the first statement of ``where``'s function."""
    path = source / "src" / where.path
    text = path.read_text(encoding="utf-8")
    function = _function(ast.parse(text), where.qualname)
    if function is None:
        raise PlantError(f"{where.path}: no function {where.qualname}")
    path.write_text(insert_first(text, function, BREAK), encoding="utf-8")


def apply(source: Path, plant: str, peft_repo: Path | None = None) -> None:
    if plant in BREAKS_AT:
        for where in BREAKS_AT[plant]:
            break_at(source, where)
        return
    if plant in NEW_VARIANTS:
        from tests.tools.new_variant import add_variant

        add_variant(source / "src" / "peft", "MiCALinearVariant", "use_newvar", graph_break=NEW_VARIANTS[plant])
        return
    if plant in NEW_METHODS:
        from tests.tools.new_method import add_method

        add_method(source / "src" / "peft", "hra", "hracopy", graph_break=NEW_METHODS[plant])
        return
    if plant in UPSTREAM_COMMITS:
        if peft_repo is None:
            raise PlantError(f"{plant}: needs --peft-repo (a clone of huggingface/peft)")
        commit, path = UPSTREAM_COMMITS[plant]
        patch = subprocess.run(
            ["git", "-C", str(peft_repo), "show", commit, "--", path], capture_output=True, check=True
        ).stdout
        done = subprocess.run(["patch", "-R", "-p1", "-d", str(source)], input=patch, capture_output=True, check=False)
        if done.returncode != 0:
            raise PlantError(f"{plant}: the reverse of {commit[:9]} does not apply: {done.stdout.decode()[-300:]}")
        return
    if plant not in PLANTS:
        known = ", ".join([*PLANTS, *BREAKS_AT, *NEW_METHODS, *NEW_VARIANTS, *UPSTREAM_COMMITS])
        raise PlantError(f"unknown plant {plant!r}; known: {known}")
    for edit in PLANTS[plant]:
        path = source / "src" / edit.path
        text = path.read_text(encoding="utf-8")
        if edit.old not in text:
            raise PlantError(f"{plant}: {edit.path}: the text to replace is not there: {edit.old.splitlines()[0]!r}")
        planted = text.replace(edit.old, edit.new, 1)
        compile(planted, str(path), "exec")
        path.write_text(planted, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.peft_plants", description=__doc__.split("\n")[0])
    parser.add_argument("dest", type=Path)
    known = ", ".join([*PLANTS, *BREAKS_AT, *NEW_METHODS, *NEW_VARIANTS])
    parser.add_argument("--plant", action="append", default=[], help=f"one of {known}, undo-3183")
    parser.add_argument("--version", default=None, help="the PEFT release (default: the installed one)")
    parser.add_argument("--peft-repo", type=Path, help="a clone of huggingface/peft (undo-3183)")
    args = parser.parse_args(argv)
    try:
        source = download_source(args.version or importlib.metadata.version("peft"), args.dest)
        for plant in args.plant:
            apply(source, plant, args.peft_repo)
    except PlantError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(source)
    return 0


if __name__ == "__main__":
    sys.exit(main())

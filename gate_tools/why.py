"""Why the gate ran or skipped one case: the changes and rules that selected it (``RULES`` ids in
``compile_audit.selection.change_selection``), whether it was reached only while building its model, and what the
build comparison decided. Read from a gate run's OUT folder (``selection.json``, ``builds-compared.json``,
``selected-cases.txt``), which the gate writes as it decides.

    scripts/gate --why llama-tiny/lora/hotswap --out out/gate
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from compile_audit.selection.change_selection import Selection

SELECTION = "selection.json"
BUILDS = "builds-compared.json"
SELECTED = "selected-cases.txt"


def write_selection(out: Path, selection: Selection) -> None:
    """What the selection decided, change by change, for ``--why``."""
    data = {
        "everything": selection.everything,
        "cases": list(selection.cases),
        "build_only": list(selection.build_only),
        "new_cases": selection.new_cases,
        "decisions": [dataclasses.asdict(decision) for decision in selection.decisions],
    }
    (out / SELECTION).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def write_builds(out: Path, same: Sequence[str], run: dict[str, str]) -> None:
    """What the build comparison decided per case, for ``--why``."""
    data = {"same": sorted(same), "run": dict(sorted(run.items()))}
    (out / BUILDS).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


class WhyError(ValueError):
    """A gate OUT folder that cannot say why: the message names the file and what is missing."""


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WhyError(f"{path}: not there: run the gate with --select change and --out on this folder first") from None
    except (OSError, json.JSONDecodeError) as error:
        raise WhyError(f"{path}: unreadable: {error}") from None


def explain(out: Path, case: str) -> list[str]:
    """Lines saying which changes and rules selected ``case``, how, and whether it ran."""
    selection = _read(out / SELECTION)
    lines = []
    for decision in selection["decisions"]:
        cases = decision["cases"]
        if cases is None:
            lines.append(f"selected by rule {decision['rule']} (every case): {decision['reason']}")
        elif case in cases:
            building = " only while building its model" if case in decision["building"] else ""
            lines.append(f"selected{building} by rule {decision['rule']}: {decision['reason']}")
    if not lines:
        rules = sorted({d["rule"] for d in selection["decisions"]})
        lines.append(
            f"not selected: no change reaches it (the rules that decided: {', '.join(rules) or 'none'};"
            f" {len(selection['cases'])} case(s) selected)"
        )
    builds_path = out / BUILDS
    if case in selection.get("build_only", []):
        if builds_path.is_file():
            builds = _read(builds_path)
            if case in builds["same"]:
                lines.append(
                    "build comparison: built the same on both sides (modules, tables, checks, kept tensors,"
                    " files): not run"
                )
            elif case in builds["run"]:
                lines.append(f"build comparison: runs: {builds['run'][case]}")
        else:
            lines.append("build comparison: not made (the gate stopped before it)")
    selected = out / SELECTED
    if selected.is_file():
        ran = case in selected.read_text(encoding="utf-8").split()
        lines.append("so it ran on both sides" if ran else "so it did not run")
    return lines


def main(argv: Sequence[str], prog: str) -> int:
    parser = argparse.ArgumentParser(prog=f"{prog} --why", description=__doc__.splitlines()[0])
    parser.add_argument("--why", required=True, metavar="CASE", help="a case id: llama-tiny/lora/hotswap")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="the gate run's OUT folder")
    args = parser.parse_args(argv)
    try:
        lines = explain(args.out, args.why)
    except WhyError as error:
        print(f"gate: --why: {error}")
        return 2
    print(f"{args.why}:")
    print("\n".join(f"  {line}" for line in lines))
    return 0

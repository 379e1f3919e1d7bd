"""Writes tests/new_method_cases.json: the ids of the cases a method the registry does not know gets in the default
run, from SELECTION (tests/cases.py). The replay of PEFT's history prices a commit's new method with them.

    python -m tests.tools.new_method_cases
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.cases import derived_case_templates

PATH = Path(__file__).resolve().parents[1] / "new_method_cases.json"
WHY = (
    "the cases a method the registry does not know gets in the default run (tests/cases.py, SELECTION, its DERIVED"
    " rows), {method} in place of its name: what the gate runs for a pull request that adds a method. The replay"
    " (compile_audit.selection.history_replay) prices a new method as these cases of the matrix's methods, on"
    " average. Written by python -m tests.tools.new_method_cases"
)


def main() -> int:
    PATH.write_text(json.dumps({"why": WHY, "cases": derived_case_templates()}, indent=1) + "\n", encoding="utf-8")
    print(f"{PATH}: {len(derived_case_templates())} case ids")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

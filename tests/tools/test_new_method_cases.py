"""The replay's price of a new method is the cases the gate runs for one."""

import json

from tests.cases import derived_case_templates
from tests.tools.new_method_cases import PATH


def test_the_new_method_cases_file_holds_what_selection_gives_a_derived_method():
    written = json.loads(PATH.read_text(encoding="utf-8"))["cases"]
    assert written == derived_case_templates(), (
        f"{PATH.name} is stale (SELECTION's DERIVED rows changed): run python -m tests.tools.new_method_cases"
    )

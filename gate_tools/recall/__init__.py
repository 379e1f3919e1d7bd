"""The selection's recall measured against outcomes: changes planted across PEFT, the cases whose verdict changed,
and whether the selection named them (``python -m gate_tools.recall``)."""

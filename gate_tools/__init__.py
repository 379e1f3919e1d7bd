"""The compile gate's tools: the gate (base vs head) and bisect, run from a checkout of this repository.

Modules:
  gate            the gate locally: the same pytest selection on PEFT base and head, each in a fresh venv, then
                  the diff (entry point ``peft-compile-gate``, or ``scripts/gate`` from a checkout)
  bisect/         the PEFT commit or torch / transformers / peft release that changed one case (entry point
                  ``peft-compile-bisect``, or ``scripts/bisect``)
  known_failures  failed cases of a report marked as known failures (``python scripts/record_known_failures.py``)
  venv            the scratch virtualenv both tools build: what its commands run with, caller settings left out
  checkout        the checkout the tools run (its tests/ and conftest.py are not part of an installed package)

The tools use compile_audit (reports, diff, budgets) and never bench_models or compile_gate; nothing in
compile_audit, compile_gate or bench_models imports them.
"""

"""The selection: which cases a change to the package under test can reach, and why. The two versions' source
compared (``code_changes``, ``readers``, ``tables``, ``outside_names``), the footprints each case left
(``footprints_file``, ``footprints_record``, ``package_inventory``), the rules that meet them (``change_selection``),
the builds compared before the first compile (``builds_file``), the coverage of PEFT's layer forwards (``coverage``)
and the replay over PEFT's history (``history_replay``). Torch-free; it and the report's records
(``compile_audit.artifacts``) never import each other."""

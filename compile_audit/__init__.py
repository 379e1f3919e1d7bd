"""The compile gate's engine, in three layers (docs/architecture.md): ``probe`` measures what Dynamo does while a case
compiles, ``rules`` judges it (roots, budgets, the verdict), ``artifacts`` writes and reads the files runs leave
(reports, diffs, footprints, the selection of a change). It knows torch only, never a zoo."""

"""bisect: name the PEFT commit, or the torch / transformers / peft release, that changed one case.

Run it as ``peft-compile-bisect`` (installed) or ``scripts/bisect`` (a checkout, nothing installed).

Modules, each with one job:
  search     the bisection over an ordered list of candidates, with skips (pure; no I/O)
  signature  what a case's report says, reduced to what bisect compares, and the evidence of a change
  driver     endpoints first, then the search: a first changed candidate, no change, or undecided
  releases   the releases an index has between two versions
  history    a PEFT checkout's commits between two refs, and one commit exported without touching it
  lab        the scratch venv: installs and one case run with --compile-report
  cli        arguments, the two modes, what is printed, exit statuses
"""

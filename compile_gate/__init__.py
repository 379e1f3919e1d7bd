"""The compile gate's pytest layer: options, hooks, fixtures and the session that writes the report once.

Registered as a ``pytest11`` entry point (``compile_gate.plugin``). Imports pytest and ``compile_audit``;
never a zoo.
"""

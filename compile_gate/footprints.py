"""Each case's footprint: what it ran of the packages under test (``compile_audit.probe.footprint``), recorded from
its setup to the end of its body, and handed to its record. ``--footprints-only`` runs every case eagerly to record it
(Dynamo off, lines too), judging nothing; ``tests/footprints.json`` is written from those records
(``python -m compile_audit.selection.change_selection record``)."""

from __future__ import annotations

from typing import Any

import pytest

from compile_audit.probe.footprint import FootprintRecorder
from compile_audit.probe.footprint import active as footprint_active

OPTION = "--footprints-only"
RECORDER = pytest.StashKey[FootprintRecorder]()


def add_option(group: Any) -> None:
    group.addoption(
        OPTION,
        action="store_true",
        help="run every case with Dynamo disabled, only to record its footprint into the report; judges nothing",
    )


def only(config: pytest.Config) -> bool:
    """``--footprints-only``: cases run eagerly to record their footprints, nothing judged."""
    return bool(config.getoption(OPTION))


def timed(item: pytest.Item) -> bool:
    """A test timed by pytest-benchmark records no footprint: a profiler would distort its timings, and
    pytest-benchmark pauses profilers by handing ``sys.getprofile()`` back to ``sys.setprofile``, which cProfile's
    object does not survive."""
    return "benchmark" in getattr(item, "fixturenames", ())


def start(item: pytest.Item) -> None:
    """Record the case from here on (left in its body's hook, or at teardown after a failed setup)."""
    lines = only(item.config)  # Dynamo is off: a line tracer changes nothing it does
    recorder = FootprintRecorder(item.config.getini("compile_footprint_packages"), lines=lines)
    item.stash[RECORDER] = recorder.__enter__()


def stop(item: pytest.Item) -> None:
    recorder = item.stash.get(RECORDER, None)
    if recorder is not None and recorder in footprint_active():
        recorder.__exit__(None, None, None)


def run_only(item: pytest.Item):
    """The body of a case under ``--footprints-only`` (a ``pytest_runtest_call`` wrapper's part): it ran eagerly to
    record what it runs; whatever it raised, nothing is judged."""
    try:
        yield
    except Exception as exc:
        detail = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    else:
        detail = "ran to the end"
    finally:
        stop(item)
    pytest.skip(f"{OPTION}: footprint recorded, nothing judged (the eager run {detail})")


def record_fields(item: pytest.Item) -> dict[str, Any]:
    """The case record's footprint fields: the functions it ran, its lines (under ``--footprints-only``), those it
    ran only before its first compile, and whether it started processes whose footprints it misses."""
    stop(item)
    recorder = item.stash.get(RECORDER, None)
    if recorder is None:
        return {"footprint": {}, "footprint_lines": {}, "footprint_build_only": {}, "footprint_elsewhere": False}
    return {
        "footprint": recorder.footprint(),
        "footprint_lines": recorder.lines(),
        "footprint_build_only": recorder.built_only(),
        "footprint_elsewhere": recorder.other_processes,
    }

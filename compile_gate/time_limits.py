"""Each case's time limit, and what a case that ran past it is reported as: hung, with its phase and where it waited.

The mechanism is pytest-timeout's signal method (a ``timeout`` mark per case): at the limit it dumps every other
thread's stack and fails the test where its main thread waits, and the session goes on with the next case. A case
whose main thread never returns to Python (a C call that blocks) is ended by a backstop, faulthandler's watchdog: it
dumps every thread's stack and ends the process, which the gate then reports as a crashed case
(:mod:`compile_gate.crashes`).

The limit follows the case's recorded duration (the ``compile_case_durations`` ini value: pytest-split's durations
file, seconds by node id), many times it, with a floor; ``--case-timeout SECONDS`` sets one limit for every case and
``--case-timeout 0`` turns limits off.
"""

from __future__ import annotations

import faulthandler
import json
import re
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from _pytest._code.code import ExceptionInfo

from compile_audit.locations import location

TIMES_RECORDED = 10  # a case may take this many times its recorded duration
FLOOR_S = 300.0  # and never less: a loaded machine or a cold compile cache is slower than the recording
UNRECORDED_S = 1800.0  # a case with no recorded duration (a new method's)
BACKSTOP_GRACE_S = 120.0  # after the limit, the signal method's failure has had this long to end the case
MAX_HUNG = 3  # cases of one run that may hang before the rest are not run
AUTO = "auto"
OFF = 0.0

_MACHINERY = re.compile(r"[/\\](_pytest|pytest_timeout\.py|pluggy)")
_STDLIB = sysconfig.get_paths()["stdlib"]

STARTED = pytest.StashKey[tuple[float, float]]()  # (monotonic start, limit) of the case's timer


def add_options(group: pytest.OptionGroup) -> None:
    group.addoption(
        "--case-timeout",
        default=AUTO,
        metavar="SECONDS",
        help=f"each case's time limit: {AUTO!r} ({TIMES_RECORDED}x its recorded duration, at least {FLOOR_S:.0f} s;"
        f" {UNRECORDED_S:.0f} s where none is recorded), a number of seconds for every case, or 0 for none. A case"
        " past its limit fails as hung, naming its phase and where it waited",
    )
    group.addoption(
        "--max-hung-cases",
        type=int,
        default=MAX_HUNG,
        metavar="N",
        help=f"after N cases of the run hung, skip the rest, naming them (default {MAX_HUNG}; 0: run every case"
        " whatever hung): a change that makes every case wait would otherwise cost each case its whole limit",
    )


def add_ini(parser: pytest.Parser) -> None:
    parser.addini(
        "compile_case_durations",
        "pytest-split durations file (seconds by node id) the cases' time limits follow (--case-timeout auto)",
        default="",
    )


def configured_limit(config: pytest.Config) -> float | str:
    """``--case-timeout`` as given: AUTO, or seconds (OFF for none); a bad value is a usage error."""
    value = str(config.getoption("--case-timeout")).strip()
    if value == AUTO:
        return AUTO
    try:
        seconds = float(value)
    except ValueError:
        raise pytest.UsageError(f"--case-timeout {value!r}: expected {AUTO!r} or a number of seconds") from None
    if seconds < 0:
        raise pytest.UsageError(f"--case-timeout {value!r}: a limit cannot be negative (0 turns limits off)")
    return seconds


def recorded_durations(config: pytest.Config) -> dict[str, float]:
    """The durations file's seconds by node id; a file that cannot be read is a usage error naming it."""
    name = config.getini("compile_case_durations")
    if not name:
        return {}
    path = Path(config.rootpath, name)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise pytest.UsageError(f"compile_case_durations: cannot read {path}: {error}") from None
    if not isinstance(data, dict) or not all(isinstance(v, int | float) for v in data.values()):
        raise pytest.UsageError(f"compile_case_durations: {path} is not a mapping of node ids to seconds")
    return {str(k): float(v) for k, v in data.items()}


def limit_for(nodeid: str, durations: dict[str, float]) -> float:
    recorded = durations.get(nodeid)
    return UNRECORDED_S if recorded is None else max(FLOOR_S, TIMES_RECORDED * recorded)


def mark_cases(config: pytest.Config, cases: list[pytest.Item]) -> None:
    """A ``timeout`` mark on each case (one it already has, or pytest-timeout's own ``--timeout``, wins)."""
    configured = configured_limit(config)
    if configured == OFF or config.getoption("timeout", None) is not None:
        return
    durations = recorded_durations(config) if configured == AUTO else {}
    for item in cases:
        if item.get_closest_marker("timeout") is None:
            limit = limit_for(item.nodeid, durations) if configured == AUTO else configured
            item.add_marker(pytest.mark.timeout(limit, method="signal"))


def skip_after_too_many_hung(config: pytest.Config, hung: list[str]) -> None:
    """Skip the case, naming those that hung, once the run has seen --max-hung-cases of them."""
    cap = config.getoption("--max-hung-cases")
    if cap > 0 and len(hung) >= cap:
        shown = ", ".join(hung[:cap])
        pytest.skip(f"not run: {len(hung)} case(s) of this run hung already ({shown}); --max-hung-cases {cap}")


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings) -> None:
    """When the case's timer starts, and its limit (pytest-timeout then sets the timer itself); the backstop."""
    item.stash[STARTED] = (time.monotonic(), float(settings.timeout))
    faulthandler.dump_traceback_later(settings.timeout + BACKSTOP_GRACE_S, exit=True, file=sys.__stderr__)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> None:
    faulthandler.cancel_dump_traceback_later()


def ran_past_limit(item: pytest.Item) -> float | None:
    """The case's limit if it has run that long (its failure is the timer's), else None."""
    started = item.stash.get(STARTED, None)
    if started is None:
        return None
    start, limit = started
    return limit if time.monotonic() - start >= limit else None


def hung_message(limit: float, phase: str | None, excinfo: ExceptionInfo[BaseException]) -> str:
    """One line: the limit, the phase the case was in, and the innermost line of its own code where it waited."""
    where = waiting_at(excinfo)
    during = f"in phase {phase}" if phase else "before its first phase (setting up or building its model)"
    return f"hung: ran past its time limit of {limit:.0f} s {during}; waiting at {where}"


def waiting_at(excinfo: ExceptionInfo[BaseException]) -> str:
    """The innermost frame below the timer's own (pytest's, pytest-timeout's), and the innermost one outside Python's
    library that led there (the case's code) where that is another."""
    entries = [entry for entry in excinfo.traceback if not _MACHINERY.search(str(entry.path))]
    if not entries:
        return "an unknown place"
    innermost = entries[-1]
    own = [entry for entry in entries if not str(entry.path).startswith(_STDLIB)]
    where = _at(innermost)
    if own and own[-1] is not innermost:
        where += f", reached from {_at(own[-1])}"
    return where


def _at(entry) -> str:
    return f"{location(str(entry.path), entry.lineno + 1)} in {entry.name}"

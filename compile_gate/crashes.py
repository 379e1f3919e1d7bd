"""A case whose process died (a signal, ``os._exit``, the out-of-memory killer) as a record: crashed, with the exit
code or signal and the last phase it entered.

A process that dies writes nothing more, so each xdist worker keeps a note of where it is (the case's report fields
and its phase) in a file of the controller's folder, rewritten at each case and phase. When xdist reports a worker
crashed while running a case, the controller reads that note and the worker process's exit status. Without xdist a
dying process ends the session with it: ``scripts/gate`` always runs its cases on xdist workers.
"""

from __future__ import annotations

import json
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

import pytest

from compile_audit.files import write_text_atomic

FOLDER_KEY = "compile_gate_notes"  # workerinput: where the workers keep their notes
EXIT_WAIT_S = 10.0


class WorkerNotes:
    """A worker's note of the case it runs and the phase it is in (one small file, replaced on each change), and of
    the cases it saw hang (one file per worker, which every worker reads: the run's count)."""

    def __init__(self, folder: Path, worker: str) -> None:
        self.folder = folder
        self.path = folder / f"{worker}.json"
        self.hung_path = folder / f"{worker}.hung"
        self.note: dict[str, Any] = {}

    def case_hung(self, case_id: str) -> None:
        with self.hung_path.open("a", encoding="utf-8") as file:
            file.write(case_id + "\n")

    def hung_cases(self) -> list[str]:
        """Every case any worker of this run saw hang."""
        return [line for path in sorted(self.folder.glob("*.hung")) for line in path.read_text().splitlines() if line]

    def case_started(self, nodeid: str, fields: dict[str, Any]) -> None:
        self.note = {"nodeid": nodeid, "fields": fields, "phase": None}
        self._write()

    def phase_started(self, name: str) -> None:
        if self.note:
            self.note["phase"] = name
            self._write()

    def _write(self) -> None:
        write_text_atomic(self.path, json.dumps(self.note))


def notes_for(config: pytest.Config, folder: Path | None) -> WorkerNotes | None:
    """The notes of the process that runs cases: an xdist worker's in its controller's folder, or, without xdist, the
    session's own in ``folder``; None for xdist's controller, which runs none."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        given = workerinput.get(FOLDER_KEY)
        return WorkerNotes(Path(given), workerinput["workerid"]) if given else None
    return None if distributed(config) or folder is None else WorkerNotes(folder, "main")


def distributed(config: pytest.Config) -> bool:
    """Whether this process is xdist's controller, handing cases to workers."""
    return getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput")


class CrashWatch:
    """The controller's side: the folder it hands the workers, and what a crashed worker's note says."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[FOLDER_KEY] = str(self.folder)

    def crash_fields(self, nodeid: str, worker: Any) -> dict[str, Any] | None:
        """The crashed case's report fields with why it ended; None when its worker left no note of it."""
        worker_id = getattr(getattr(worker, "gateway", None), "id", None)
        note = self._read(worker_id) if worker_id else None
        if not note or note.get("nodeid") != nodeid:
            return None
        phase = note.get("phase")
        during = f"in phase {phase}" if phase else "before its first phase (setting up or building its model)"
        return {
            **note["fields"],
            "audited": False,
            "raised": "ProcessDied",
            "error": f"crashed: the process running it died ({exit_status(worker)}) {during}",
        }

    def _read(self, worker_id: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.folder / f"{worker_id}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None


def exit_status(worker: Any) -> str:
    """How the worker's process ended, in words: its exit code or the signal that killed it."""
    popen = getattr(getattr(getattr(worker, "gateway", None), "_io", None), "popen", None)
    code = None
    if popen is not None:
        try:
            code = popen.wait(timeout=EXIT_WAIT_S)
        except Exception:  # still running, or not a process we can wait for: the status stays unknown
            code = popen.poll()
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def new_folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="compile-gate-notes-"))


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)

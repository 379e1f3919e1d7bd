"""Run a function on N local ranks (one process each) and collect what each shipped, within a timeout.

Each rank runs in its own process group (``os.setsid``), with ``MASTER_ADDR=127.0.0.1`` and a free port, its
output in ``rank<N>.log`` and one intra-op thread. The launcher creates the default torch.distributed process group
around the function and destroys it only once the function has returned and its objects (a DDP wrapper) are gone:
a DDP wrapper freed after its group was destroyed can hang the rank. The function gets a dict to fill with plain
data (JSON) as it goes, written to ``rank<N>.json`` at every assignment; it comes back even when the rank raised
(with the traceback text) or was killed (as far as it got). A rank still running at the deadline, or a few seconds
after a peer failed (its collectives would wait for the peer), first writes its Python stacks to its log, then is
killed with its process group: a hung rank is a failure that shows where it hung, never a hung session.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import faulthandler
import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from compile_audit.probe import footprint
from compile_audit.probe.collector import freeze_survivors

PEER_GRACE_S = 10.0  # after a rank failed, how long its peers get to fail or finish on their own
STACK_DUMP_WAIT_S = 1.0  # before a kill, how long a rank gets to write its Python stacks (SIGUSR1) to its log
LOG_TAIL_LINES = 30
STACK_LINES = 12  # innermost frames of a killed rank's stack shown in its failure


@dataclasses.dataclass
class RankOutcome:
    rank: int
    exitcode: int | None  # None: killed
    killed: str | None  # why it was killed (the deadline passed, or a peer failed), or None
    shipped: dict[str, Any]  # what the rank put in its dict, as JSON data
    error: str | None  # the rank's traceback text, when it raised
    log: Path
    seconds: float

    def log_tail(self) -> str:
        try:
            lines = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no output)"
        return "\n".join(lines[-LOG_TAIL_LINES:]) or "(no output)"

    def stack(self) -> str:
        """Innermost frames first, as the rank dumped them when it was about to be killed."""
        try:
            lines = self.log.with_suffix(".stack").read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no stack dumped)"
        return "\n".join(lines[:STACK_LINES]) or "(no stack dumped)"

    def summary(self) -> str | None:
        """One line: the exception a rank raised (its traceback's last line), or how it died; None when it finished."""
        if self.error is not None:
            lines = [line.strip() for line in self.error.strip().splitlines() if line.strip()]
            return lines[-1] if lines else f"rank {self.rank} raised"
        if self.killed is not None:
            return f"rank {self.rank} {self.killed} and was killed"
        if self.exitcode != 0:
            return f"rank {self.rank} exited with code {self.exitcode} without a traceback"
        return None

    def failure(self) -> str | None:
        """Why this rank failed, with its traceback or the tail of its output; None when it finished cleanly."""
        if self.error is not None:
            return f"rank {self.rank} raised:\n{self.error.rstrip()}"
        if self.killed is not None:
            return (
                f"rank {self.rank} {self.killed} and was killed with its process group; where it was:\n"
                f"{self.stack()}\nits last output ({self.log}):\n{self.log_tail()}"
            )
        if self.exitcode != 0:
            return (
                f"rank {self.rank} exited with code {self.exitcode} without a traceback; its last output"
                f" ({self.log}):\n{self.log_tail()}"
            )
        return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def default_start_method() -> str:
    """forkserver: each rank forks from a server process that has imported torch and the rank function's module and
    never ran autograd or CUDA. Forking the test process itself is refused by torch (2.14 and newer) once its autograd
    threads have run, and is unsafe once it holds a CUDA context; spawn re-imports everything for every rank."""
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def _redirect_output(log: Path) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (the streams of the rank's whole life)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


class _Shipped(dict):
    """The rank's plain data, written to its JSON file at every assignment (a killed rank still tells how far it
    got)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.error: str | None = None

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self.write()

    def write(self) -> None:
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps({"shipped": self, "error": self.error}), encoding="utf-8")
        os.replace(partial, self.path)


def _store(rank: int, world_size: int, port: int, timeout: datetime.timedelta) -> dist.TCPStore:
    """The rendezvous store, listening on 127.0.0.1 only (by default it listens on every interface)."""
    listen_fd = None
    if rank == 0:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen()
        listen_fd = server.detach()  # the store owns it from here
    return dist.TCPStore("127.0.0.1", port, world_size, rank == 0, timeout=timeout, master_listen_fd=listen_fd)


def _run(
    fn: Callable[..., Any], shipped: _Shipped, rank: int, world_size: int, port: int, backend: str, seconds: float, args
) -> None:
    if backend == "nccl":
        torch.cuda.set_device(rank)
    timeout = datetime.timedelta(seconds=seconds)
    store = _store(rank, world_size, port, timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
    try:
        fn(shipped, rank, world_size, *args)
    finally:
        dist.destroy_process_group()


def _rank_main(
    fn: Callable[..., Any],
    rank: int,
    world_size: int,
    port: int,
    workdir: str,
    backend: str,
    timeout: float,
    args: tuple,
) -> None:
    os.setsid()
    workdir_path = Path(workdir)
    _redirect_output(workdir_path / f"rank{rank}.log")
    stack_file = open(workdir_path / f"rank{rank}.stack", "w")  # noqa: SIM115 (open until the rank exits)
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    freeze_survivors()  # what the rank imported lives until it exits: each phase's collection stays cheap
    shipped = _Shipped(workdir_path / f"rank{rank}.json")
    try:
        _run(fn, shipped, rank, world_size, port, backend, timeout, args)
    except BaseException:
        shipped.error = traceback.format_exc()
    shipped.write()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if shipped.error is None else 1)


def _kill_group(process: multiprocessing.process.BaseProcess) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGUSR1)
        process.join(STACK_DUMP_WAIT_S)
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # not yet its own group leader, or gone already
        process.kill()
    process.join()


def _outcome(rank: int, process: Any, workdir: Path, killed: str | None, seconds: float) -> RankOutcome:
    data: dict[str, Any] = {}
    with contextlib.suppress(OSError, json.JSONDecodeError):
        data = json.loads((workdir / f"rank{rank}.json").read_text(encoding="utf-8"))
    return RankOutcome(
        rank=rank,
        exitcode=None if killed else process.exitcode,
        killed=killed,
        shipped=data.get("shipped") or {},
        error=data.get("error"),
        log=workdir / f"rank{rank}.log",
        seconds=round(seconds, 2),
    )


def launch(
    fn: Callable[..., Any],
    args: tuple = (),
    *,
    world_size: int,
    timeout: float,
    workdir: str | Path,
    backend: str = "gloo",
    start_method: str | None = None,
) -> list[RankOutcome]:
    """Run ``fn(shipped, rank, world_size, *args)`` on ``world_size`` ranks in a process group of ``backend`` (gloo;
    nccl: rank N on GPU N); one outcome per rank, in rank order.

    ``fn`` must be importable by name (forkserver and spawn pickle it). ``timeout``: seconds for all ranks together."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    footprint.note_other_processes()
    method = start_method or default_start_method()
    context = multiprocessing.get_context(method)
    if method == "forkserver":  # imported once by the server (when it starts), not once per rank
        context.set_forkserver_preload(["torch", fn.__module__])
    port = free_port()
    started = time.monotonic()
    deadline = started + timeout
    processes = [
        context.Process(target=_rank_main, args=(fn, rank, world_size, port, str(workdir), backend, timeout, args))
        for rank in range(world_size)
    ]
    ended: dict[int, float] = {}
    why = f"did not finish within {timeout:g} s"
    try:
        for process in processes:
            process.start()
        while len(ended) < world_size and time.monotonic() < deadline:
            waiting = {p.sentinel: rank for rank, p in enumerate(processes) if rank not in ended}
            left = max(0.0, deadline - time.monotonic())
            for sentinel in multiprocessing.connection.wait(list(waiting), timeout=left):
                rank = waiting[sentinel]
                processes[rank].join()
                ended[rank] = time.monotonic() - started
                if processes[rank].exitcode != 0 and time.monotonic() + PEER_GRACE_S < deadline:
                    deadline = time.monotonic() + PEER_GRACE_S
                    why = f"was still running {PEER_GRACE_S:g} s after rank {rank} failed"
    finally:
        for rank, process in enumerate(processes):
            if rank not in ended and process.pid is not None:
                _kill_group(process)
    return [
        _outcome(rank, process, workdir, None if rank in ended else why, ended.get(rank, time.monotonic() - started))
        for rank, process in enumerate(processes)
    ]

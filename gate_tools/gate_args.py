"""The gate's command line: its options, and each SPEC and argument checked before anything is fetched or built
(gate_tools.gate runs the flow)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import os
import re
from collections.abc import Sequence
from pathlib import Path

from gate_tools import checkout

EXIT_OK, EXIT_REGRESSION, EXIT_ERROR = 0, 1, 2


PROG = "peft-compile-gate"  # scripts/gate passes its own name


REPO = checkout.find()  # None: not run from a checkout (an error once the arguments are parsed)


ARCHIVES = (".whl", ".tar.gz", ".zip")


SELECTIONS = ("change", "default", "full")
# What the failed head cases are rerun with, for their logs: every break and every failed guard.
RERUN_TORCH_LOGS = "graph_breaks,recompiles_verbose"


class GateError(Exception):
    """Whatever stops the gate before a verdict: exit 2 with this one-line reason."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print the usage too: the reason must stay one line
        raise GateError(f"{message} (see {self.prog} --help)")


@dataclasses.dataclass(frozen=True)
class Options:
    base: str
    head: str
    out: Path
    torch: str
    torch_index_url: str | None
    torch_pre: bool
    work_dir: Path | None
    rerun_failed: bool
    chart: bool
    select: str
    footprints: Path
    shard: tuple[int, int] | None  # (K, N): this run is shard K of N of the selection (pytest-split)
    jobs: int  # pytest processes per side (pytest-xdist), each one thread
    unpinned: bool  # transformers as pip resolves it, not as the budgets were recorded
    pytest_args: tuple[str, ...]
    audit_selection: int = 0  # cases outside the selection run too: a verdict that changes there is a miss
    audit_seed: int = 0


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = _Parser(
        prog=prog,
        usage=f"{prog} --base SPEC --head SPEC --out DIR [options] [-- PYTEST_ARGS...]",
        description="Run the same pytest selection on PEFT base and head in fresh virtualenvs and diff the reports. "
        "Exit 0: nothing regressed; 1: head regressed; 2: anything else.",
    )
    parser.add_argument("--base", required=True, metavar="SPEC", help="PEFT base: a pin, a local path or a git URL")
    parser.add_argument("--head", required=True, metavar="SPEC", help="PEFT head, the same kinds as --base")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="where reports, logs and diff go")
    parser.add_argument("--torch", metavar="SPEC", help="torch for both sides (default: this Python's version)")
    parser.add_argument(
        "--torch-index-url",
        metavar="URL",
        default=os.environ.get("GATE_TORCH_INDEX_URL") or None,
        help="package index for torch only, e.g. https://download.pytorch.org/whl/cpu (env: GATE_TORCH_INDEX_URL)",
    )
    parser.add_argument("--torch-pre", action="store_true", help="allow torch pre-releases (the nightly)")
    parser.add_argument(
        "--audit-selection",
        type=int,
        default=0,
        metavar="N",
        help="also run N recorded cases the change did not select (a seeded sample); one whose verdict head changed"
        " fails the gate with 'selection missed'",
    )
    parser.add_argument("--audit-seed", type=int, default=0, metavar="S", help="the sample's seed (default 0)")
    parser.add_argument("--work-dir", type=Path, metavar="DIR", help="keep the venvs and caches here (must be empty)")
    parser.add_argument(
        "--rerun-failed", action="store_true", help=f"rerun head's failed cases with TORCH_LOGS={RERUN_TORCH_LOGS}"
    )
    parser.add_argument(
        "--chart", action="store_true", help="mermaid charts in diff.md (python -m compile_audit.artifacts.diff)"
    )
    parser.add_argument(
        "--select",
        choices=SELECTIONS,
        default="change",
        help="change (default): every case that ran a PEFT function whose executed code differs between base and"
        " head (tests/footprints.json); default: the default run; full: the full matrix",
    )
    parser.add_argument(
        "--footprints",
        type=Path,
        metavar="PATH",
        help="the footprints file --select change reads (default: tests/footprints.json)",
    )
    parser.add_argument(
        "--shard",
        metavar="K/N",
        help="run shard K of N of the selection on both sides (pytest-split, balanced by tests/durations.json);"
        " merge the shards' base.json and head.json with python -m compile_audit.artifacts.merge, then diff",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="pytest processes per side (pytest-xdist; each runs one thread; default: this machine's cores)",
    )
    parser.add_argument(
        "--unpinned",
        action="store_true",
        help="install the newest transformers (and dependencies) pip allows instead of the budgets' recorded one and"
        " tests/install_pins.txt (base then runs the whole selection: the budgets cannot judge head alone on other"
        " versions)",
    )
    return parser


def check_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise GateError(f"--shard: {text!r} is not K/N with 1 <= K <= N (e.g. 2/4)")
    return int(match[1]), int(match[2])


def parse_args(argv: Sequence[str], prog: str = PROG) -> Options:
    argv = list(argv)
    ours, pytest_args = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = build_parser(prog).parse_args(ours)
    if REPO is None:
        raise GateError(checkout.NOT_FOUND)
    check_pytest_args(pytest_args)
    return Options(
        base=check_peft_spec("base", args.base),
        head=check_peft_spec("head", args.head),
        out=args.out.expanduser().resolve(),
        torch=check_torch_spec(args.torch) if args.torch is not None else default_torch_spec(),
        torch_index_url=args.torch_index_url,
        torch_pre=args.torch_pre,
        work_dir=args.work_dir.expanduser().resolve() if args.work_dir else None,
        rerun_failed=args.rerun_failed,
        chart=args.chart,
        select=args.select,
        footprints=(args.footprints or REPO / "tests" / "footprints.json").expanduser().resolve(),
        shard=check_shard(args.shard),
        jobs=max(1, args.jobs),
        unpinned=args.unpinned,
        pytest_args=tuple(pytest_args),
        audit_selection=max(0, args.audit_selection),
        audit_seed=args.audit_seed,
    )


def is_url(spec: str) -> bool:
    return re.match(r"^[a-z][a-z0-9+.-]*://", spec, re.IGNORECASE) is not None


def is_path(spec: str) -> bool:
    # As pip tells them apart: a bare name ("peft") is a requirement even when a directory has that name.
    return spec.startswith(("/", ".", "~")) or os.sep in spec or spec.endswith(ARCHIVES)


def _check_common(what: str, spec: str) -> str:
    spec = spec.strip()
    if not spec:
        raise GateError(f"{what}: empty spec")
    if spec.startswith("-"):
        raise GateError(f"{what}: {spec!r} looks like a pip option, not something to install")
    return spec


def _check_path(what: str, spec: str) -> str:
    path = Path(spec).expanduser().resolve()
    if not path.exists():
        raise GateError(f"{what}: no such file or directory: {spec!r}")
    if path.is_dir() and not any((path / name).is_file() for name in ("pyproject.toml", "setup.py")):
        raise GateError(f"{what}: {spec!r} is a directory without pyproject.toml or setup.py")
    return str(path)


def _is_requirement(spec: str, name: str) -> bool:
    # The name, then the end, extras, a version specifier, a direct URL (name @ url) or a marker (;).
    return re.match(rf"^{name}\s*($|[\[(<>=!~@;])", spec, re.IGNORECASE) is not None


def check_peft_spec(side: str, spec: str) -> str:
    """The spec as pip should get it: a URL as is, a path made absolute, a requirement naming peft."""
    return _check_spec(f"--{side}", spec, "peft")


def check_torch_spec(spec: str) -> str:
    return _check_spec("--torch", spec, "torch")


def _check_spec(what: str, spec: str, name: str) -> str:
    spec = _check_common(what, spec)
    if is_url(spec) or _is_requirement(spec, name):
        return spec
    if is_path(spec):
        return _check_path(what, spec)
    raise GateError(f"{what}: {spec!r} is not a {name} requirement, a path or a URL (e.g. '{name}==1.2.3')")


def default_torch_spec() -> str:
    """This Python's torch version, without its local label (+cpu): the index decides the build."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        raise GateError("this Python has no torch to match: pass --torch SPEC (e.g. --torch torch==2.13.0)") from None
    return f"torch=={version.split('+')[0]}"


def check_pytest_args(pytest_args: Sequence[str]) -> None:
    for arg in pytest_args:
        if arg.split("=")[0] in ("--compile-report", "--update-budgets"):
            raise GateError(
                f"pytest args: {arg.split('=')[0]} is not allowed (the gate sets the reports, never budgets)"
            )
        if arg.split("=")[0] in ("--full-matrix", "--with-cases", "--cases", "--splits", "--group", "-n"):
            raise GateError(f"pytest args: {arg.split('=')[0]} is not allowed (the gate chooses: --select, --shard)")

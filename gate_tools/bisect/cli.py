"""bisect: arguments, the two modes, what is printed, exit statuses.

    peft-compile-bisect --repo PATH --good REF --bad REF --case CASE_ID [--torch SPEC]
    peft-compile-bisect --package torch|transformers|peft --good VERSION --bad VERSION --case CASE_ID [--pre]

(``scripts/bisect`` from a checkout, nothing installed.)

Exit status: 0 a culprit was named, 1 good and bad agree (nothing to find), 2 a usage or set-up error or
no single culprit (one line on stderr says which).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from gate_tools import checkout
from gate_tools.bisect import history, releases
from gate_tools.bisect.driver import (
    VERDICT_WORDS,
    BisectError,
    Candidate,
    Change,
    Measurement,
    NoChange,
    find_change,
    verdict_of,
)
from gate_tools.bisect.history import HistoryError
from gate_tools.bisect.lab import (
    DEFAULT_TIMEOUT,
    GATE_PACKAGES,
    OPTIONAL_PACKAGES,
    Lab,
    LabError,
    caller_pins,
    caller_versions,
    normalize,
    valid_case_id,
)
from gate_tools.bisect.releases import ReleaseError
from gate_tools.bisect.signature import evidence

PROG = "peft-compile-bisect"  # scripts/bisect passes its own name
GATE_ROOT = checkout.find()  # None: not run from a checkout (an error once the arguments are parsed)
PACKAGES = ("torch", "transformers", "peft")
FOUND, NO_CHANGE, ERROR = 0, 1, 2


class UsageError(Exception):
    """Bad arguments; the message is one line."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print the usage too: one line is enough
        raise UsageError(message)


def build_parser(prog: str = PROG) -> Parser:
    parser = Parser(
        prog=prog,
        description="Name the PEFT commit (--repo) or the torch/transformers/peft release (--package) "
        "that changed one case's graph breaks, recompiles or status.",
    )
    parser.add_argument("--case", required=True, help="case id, e.g. llama-tiny/lora-dora/train-eval-train")
    parser.add_argument("--good", required=True, help="the reference: a commit (git mode) or a version")
    parser.add_argument("--bad", required=True, help="where the case differs: a later commit or version")
    git = parser.add_argument_group("git mode")
    git.add_argument("--repo", metavar="PATH", help="a PEFT checkout (read only: nothing in it changes)")
    git.add_argument("--torch", metavar="SPEC", help="torch to test with (a version or requirement; default: yours)")
    parser.add_argument(
        "--hold",
        action="append",
        default=[],
        metavar="NAME==VERSION",
        help="test with this version of another gate package instead of yours (e.g. transformers==5.17.0)",
    )
    versions = parser.add_argument_group("versions mode")
    versions.add_argument("--package", choices=PACKAGES, help="bisect this package's releases; the others stay yours")
    versions.add_argument("--pre", action="store_true", help="count pre-releases too")
    scratch = parser.add_argument_group("scratch environment")
    scratch.add_argument("--workdir", metavar="DIR", help="keep the venv, logs and reports here (default: a temp dir)")
    scratch.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS", help="per case run")
    scratch.add_argument("--find-links", action="append", default=[], metavar="DIR", help="passed to pip")
    scratch.add_argument("--index-url", metavar="URL", help="passed to pip")
    scratch.add_argument("--extra-index-url", action="append", default=[], metavar="URL", help="passed to pip")
    return parser


def check_arguments(args: argparse.Namespace) -> None:
    """The combinations argparse cannot express; UsageError with one line."""
    if bool(args.repo) == bool(args.package):
        raise UsageError("give exactly one of --repo PATH (git mode) or --package NAME (versions mode)")
    if args.torch and not args.repo:
        raise UsageError("--torch belongs to git mode (--repo); in versions mode the other packages stay yours")
    if args.pre and not args.package:
        raise UsageError("--pre belongs to versions mode (--package)")
    if not valid_case_id(args.case):
        raise UsageError(f"--case {args.case!r} is not a case id (model/method/scenario[@device-backend])")
    if args.good == args.bad:
        raise UsageError(f"--good and --bad are the same ({args.good}): nothing to bisect")
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    args.holds = holds(args)
    workdir = Path(args.workdir) if args.workdir else None
    if workdir and workdir.exists() and (not workdir.is_dir() or any(workdir.iterdir())):
        raise UsageError(f"--workdir {workdir} exists and is not an empty directory")


def holds(args: argparse.Namespace) -> dict[str, str]:
    """--hold NAME==VERSION options as {name: requirement}; UsageError for an unknown or bisected package."""
    result = {}
    bisected = "peft" if args.repo else args.package
    for text in args.hold:
        name, _, version = text.partition("==")
        name = normalize(name.strip())
        if not version.strip() or name not in (*GATE_PACKAGES, *OPTIONAL_PACKAGES):
            known = ", ".join((*GATE_PACKAGES, *OPTIONAL_PACKAGES))
            raise UsageError(f"--hold {text!r}: expected NAME==VERSION with NAME one of {known}")
        if name == bisected or (name == "torch" and args.torch):
            raise UsageError(f"--hold {text!r}: {name} is what this run varies (--package, --repo or --torch)")
        result[name] = f"{name}=={version.strip()}"
    return result


def parse_arguments(argv: list[str] | None, prog: str = PROG) -> argparse.Namespace:
    args = build_parser(prog).parse_args(argv)
    check_arguments(args)
    if GATE_ROOT is None:
        raise UsageError(checkout.NOT_FOUND)
    return args


def pip_options(args: argparse.Namespace) -> list[str]:
    options = [f"--find-links={d}" for d in args.find_links]
    options += [f"--index-url={args.index_url}"] if args.index_url else []
    return options + [f"--extra-index-url={u}" for u in args.extra_index_url]


def torch_requirement(spec: str) -> str:
    """``2.11.0`` -> ``torch==2.11.0``; ``>=2.12`` -> ``torch>=2.12``; a full requirement stays."""
    if spec[:1].isdigit():
        return f"torch=={spec}"
    if spec[:1] in "=<>!~":
        return f"torch{spec}"
    if normalize(spec).startswith("torch"):
        return spec
    raise UsageError(f"--torch {spec!r} is neither a version nor a torch requirement")


def requirement_name(requirement: str) -> str:
    return normalize(re.split(r"[=<>!~ ;\[]", requirement, maxsplit=1)[0])


def caller_stack(overrides: dict[str, str]) -> tuple[list[str], list[str], dict[str, str]]:
    """(requirements, pins, versions): the gate's packages at the caller's versions, except the overrides."""
    versions = caller_versions((*GATE_PACKAGES, *OPTIONAL_PACKAGES))
    missing = [name for name in GATE_PACKAGES if name not in versions]
    if missing:
        raise LabError(f"{', '.join(missing)} not installed in {sys.executable}: the scratch venv copies your versions")
    requirements = [overrides.get(name, f"{name}=={version}") for name, version in versions.items()]
    requirements += [requirement for name, requirement in overrides.items() if name not in versions]
    return requirements, caller_pins(exclude=versions), versions


class GitMode:
    noun = "first bad commit"

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.repo = args, Path(args.repo).resolve()
        self.overrides = {**args.holds, **({"torch": torch_requirement(args.torch)} if args.torch else {})}
        self.held: list[str] = []
        self.full: dict[str, str] = {}

    def candidates(self) -> list[Candidate]:
        found = history.candidates(self.repo, self.args.good, self.args.bad)
        self.full = {c.key: f"{c.key} {c.label.split(' ', 1)[1]}" for c in found}
        return found

    def setup(self, lab: Lab) -> None:
        requirements, pins, _ = caller_stack(self.overrides)
        self.held = [r for r in requirements if requirement_name(r) in PACKAGES and requirement_name(r) != "peft"]
        lab.create(requirements, pins)

    def measure(self, lab: Lab, candidate: Candidate) -> Measurement:
        tree = lab.workdir / "src" / candidate.key
        try:
            history.export(self.repo, candidate.key, tree)
        except (HistoryError, OSError) as error:
            return Measurement.failed(f"cannot export the commit: {error}")
        try:
            return lab.measure(candidate.label, [str(tree)], options=("--no-deps", "--force-reinstall"))
        finally:
            shutil.rmtree(tree, ignore_errors=True)

    def describe(self, candidate: Candidate) -> str:
        return self.full.get(candidate.key, candidate.label)


class VersionsMode:
    noun = "first changed release"

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.package = args, args.package
        self.held: list[str] = []

    def candidates(self) -> list[Candidate]:
        available = releases.available(self.package, pip_options(self.args), self.args.pre)
        chosen = releases.between(available, self.args.good, self.args.bad, self.args.pre)
        return [Candidate(version, f"{self.package} {version}") for version in chosen]

    def setup(self, lab: Lab) -> None:
        requirements, pins, versions = caller_stack(self.args.holds)
        held = {name: f"{name}=={versions[name]}" for name in PACKAGES if name != self.package}
        self.held = list({**held, **self.args.holds}.values())
        lab.create(requirements, pins)

    def measure(self, lab: Lab, candidate: Candidate) -> Measurement:
        requirement = f"{self.package}=={candidate.key}"
        return lab.measure(candidate.label, [requirement], constraints=self.held, expect=(self.package, candidate.key))

    def describe(self, candidate: Candidate) -> str:
        return candidate.label


# ----------------------------------------------------------------------------- printing


def say(line: str) -> None:
    print(f"[bisect] {line}", file=sys.stderr, flush=True)


def progress(candidate: Candidate, measurement: Measurement, word: str) -> None:
    say(f"{candidate.label}: {word} — {measurement.summary()}")


def step_lines(candidates: list[Candidate], measurements: dict[int, Measurement]) -> list[str]:
    """Every measured candidate in order: label, verdict against good (index 0), signature."""
    width = max(len(candidates[i].label) for i in measurements)
    good = measurements[0].signature
    lines = []
    for index, measurement in sorted(measurements.items()):
        word = "good" if index == 0 else VERDICT_WORDS[verdict_of(measurement, good).kind]
        lines.append(f"  {candidates[index].label.ljust(width)}  {word:<12}  {measurement.summary()}")
    return lines


def change_text(mode: GitMode | VersionsMode, case_id: str, change: Change) -> list[str]:
    before, after = change.before, change.after
    lines = [
        f"{mode.noun}: {mode.describe(change.first_bad)}",
        f"last like good: {mode.describe(change.last_good)}",
        f"held: {', '.join(mode.held)}",
        f"case {case_id}: {before.summary()} -> {after.summary()}",
        *(f"  {line}" for line in evidence(before.case, after.case)),
    ]
    skipped = sum(1 for m in change.measurements.values() if m.untestable)
    lines.append(f"steps ({len(change.measurements)} measured, {skipped} untestable):")
    return lines + step_lines(change.candidates, change.measurements)


def no_change_text(mode: GitMode | VersionsMode, case_id: str, result: NoChange) -> list[str]:
    good, bad = result.candidates[0], result.candidates[-1]
    summary = result.measurements[0].summary()
    return [f"no change: {good.label} and {bad.label} agree on {case_id} ({summary}; held: {', '.join(mode.held)})"]


# ----------------------------------------------------------------------------- main


@contextlib.contextmanager
def workspace(path: str | None) -> Iterator[Path]:
    """The given directory (kept), or a temporary one removed at the end."""
    if path:
        Path(path).mkdir(parents=True, exist_ok=True)
        yield Path(path).resolve()
        return
    temporary = Path(tempfile.mkdtemp(prefix="peft-bisect-"))
    try:
        yield temporary
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def run(args: argparse.Namespace, make_lab: Callable[..., Lab]) -> int:
    mode = GitMode(args) if args.repo else VersionsMode(args)
    candidates = mode.candidates()
    say(f"{len(candidates)} candidates from {candidates[0].label} to {candidates[-1].label}")
    started = time.monotonic()
    with workspace(args.workdir) as workdir:
        lab = make_lab(workdir, GATE_ROOT, args.case, pip_options(args), args.timeout, say)
        mode.setup(lab)
        result = find_change(candidates, lambda candidate: mode.measure(lab, candidate), progress)
    found = isinstance(result, Change)
    print("\n".join(change_text(mode, args.case, result) if found else no_change_text(mode, args.case, result)))
    minutes, seconds = divmod(round(time.monotonic() - started), 60)
    kept = f"; venv, logs and reports kept in {args.workdir}" if args.workdir else ""
    print(f"took {minutes} min {seconds} s{kept}")
    return FOUND if found else NO_CHANGE


def main(argv: list[str] | None = None, make_lab: Callable[..., Lab] = Lab, prog: str = PROG) -> int:
    try:
        return run(parse_arguments(argv, prog), make_lab)
    except (UsageError, HistoryError, ReleaseError, LabError, BisectError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return ERROR


if __name__ == "__main__":
    sys.exit(main())

"""The selection's recall, measured against outcomes: plant changes across the installed PEFT, select for each,
run a sample of cases on both sides, and report each case whose verdict changed that the selection left out.

    python -m gate_tools.recall --out out/recall --plants 40 --sample 6 --seed 0

For each plant (drawn from every shape of :mod:`gate_tools.recall.sites`, seeded):

- the selection between the installed PEFT and a copy with the plant (the gate's own, ``select_between``), then, as
  the gate does, the build comparison of the sampled cases it reached only while building their model: each side
  fingerprints them up to their first compile (``--build-fingerprints``), and those that built the same leave the
  selection (the whole decision's recall, not the selection's alone);
- a sample of recorded cases, stratified over methods, scenarios and models: half from the selection, the rest from
  what it left out, first the cases that ran the planted function;
- each sampled case on base (the installed PEFT, one run for every plant's sample) and on head (the copy, first on
  ``PYTHONPATH``).

A **miss** is a sampled case whose verdict changed although the selection left it out. A **probe miss** is a case
that passed on head although its report names the planted line: Dynamo reached the plant and the verdict did not
see it. Recall is the verdict changes selected over the verdict changes seen; precision, the selected cases whose
verdict changed over the selected cases run. Exit 1 on any miss or probe miss, 2 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from compile_audit.artifacts.report import ReportError, read_cases
from compile_audit.selection import builds_file
from compile_audit.selection.change_selection import ModuleCache, compare_sources, outside_of, package_files, select
from compile_audit.selection.footprints_file import Footprints, FootprintsError
from compile_audit.selection.footprints_file import load as load_footprints

from .. import checkout
from .sampling import draw_plants, sample_cases
from .sites import SHAPES, Plant, Sites, by_shape

FAILED = ("failed", "error")


@dataclasses.dataclass
class Outcome:
    plant: Plant
    selected: int  # cases the selection names (every recorded case when it selects everything)
    everything: bool
    sample: list[str]
    base: dict[str, str] = dataclasses.field(default_factory=dict)  # case -> verdict
    head: dict[str, str] = dataclasses.field(default_factory=dict)
    in_selection: set[str] = dataclasses.field(default_factory=set)
    probe_misses: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    error: str = ""  # why head's run gave no report
    # Of the sample, those the selection reached only while building (the build comparison decides them), and those
    # of them that built the same on both sides (out of the selection, as the gate leaves them out).
    build_only: list[str] = dataclasses.field(default_factory=list)
    built_same: set[str] = dataclasses.field(default_factory=set)
    tables_gaining: tuple[str, ...] = ()
    names_rebound: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()  # the selection rules that decided the plant
    # Why the planted package does not import ("" where it does): the gate fails such a head before any selection
    # (a head whose PEFT does not import is a regression), so every verdict it changes is caught.
    import_error: str = ""

    @property
    def changed(self) -> list[str]:
        return [case for case in self.sample if case in self.base and self.base[case] != self.head.get(case)]

    @property
    def misses(self) -> list[str]:
        if self.import_error:
            return []
        return [case for case in self.changed if case not in self.in_selection]


def _installed_package(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FootprintsError(f"{name} is not installed here")
    return Path(next(iter(spec.submodule_search_locations)))


def _planted_copy(package: Path, plant: Plant, dest: Path) -> Path | None:
    """A copy of the package with the plant, in ``dest/<package>``; None where the edit does not compile."""
    edited = plant.apply((package.parent / plant.path).read_text(encoding="utf-8"))
    if edited is None:
        return None
    shutil.copytree(package, dest / package.name, ignore=shutil.ignore_patterns("__pycache__"))
    (dest / plant.path).write_text(edited, encoding="utf-8")
    return dest / package.name


def _run_cases(
    cases: Sequence[str], folder: Path, python_path: Path | None, extra: Sequence[str], fingerprints: bool = False
) -> tuple[Path, str]:
    """The zoo on these cases (``--cases``); the report (with ``fingerprints``: their build fingerprints, the cases
    stopped at their first compile), and the run's tail where it wrote none."""
    folder.mkdir(parents=True, exist_ok=True)
    listing = folder / "cases.txt"
    report = folder / ("builds.json" if fingerprints else "report.json")
    listing.write_text("".join(f"{case}\n" for case in cases), encoding="utf-8")
    env = {**os.environ}
    if python_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(python_path), env.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--cases={listing}"]
    output = f"--build-fingerprints={report}" if fingerprints else f"--compile-report={report}"
    command += [output, *extra]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=checkout.find())
    (folder / "pytest.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    return report, "" if report.exists() else (done.stdout + done.stderr).strip()[-600:]


def _verdicts(report: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Each case's status, and its record as JSON text (to find the planted line in)."""
    cases = read_cases(report)
    raw = {case["id"]: json.dumps(case) for case in cases.data["cases"]}
    return {case.id: case.status for case in cases.cases}, raw


class Harness:
    def __init__(self, footprints: Footprints, package: Path, out: Path, extra: Sequence[str] = ()) -> None:
        self.footprints, self.package, self.out, self.extra = footprints, package, out, tuple(extra)
        self._parsed = ModuleCache()  # every plant's copy differs from base in one file: each other file parses once
        self._base_files = package_files(package)

    def select(self, planted: Path):
        """The gate's selection between the installed package and the planted copy."""
        changes, unparsable, readers = compare_sources(self._base_files, package_files(planted), self._parsed)
        return select(self.footprints, changes, readers, unparsable, outside_of(self.footprints, self.package.name))

    def plan(
        self, plants: Sequence[Plant], count: int, sample: int, pool: Sequence[str], rng: random.Random
    ) -> list[Outcome]:
        """The first ``count`` of these plants that compile, each with its selection and sample."""
        outcomes: list[Outcome] = []
        for plant in plants:
            if len(outcomes) == count:
                break
            folder = self.out / f"plant-{len(outcomes):02d}"
            shutil.rmtree(folder, ignore_errors=True)
            planted = _planted_copy(self.package, plant, folder / "src")
            if planted is None:
                continue
            selection = self.select(planted)
            chosen = self.footprints.cases if selection.everything else selection.cases
            selected = frozenset(chosen)
            ran = self.footprints.runs.get(f"{plant.path}::{plant.where}", frozenset())
            drawn = sample_cases(pool, selected, ran, sample, rng)
            outcome = Outcome(plant, len(selected), selection.everything, drawn)
            outcome.in_selection = {case for case in drawn if case in selected}
            outcome.build_only = sorted(set(drawn) & set(selection.build_only))
            outcome.tables_gaining, outcome.names_rebound = selection.tables_gaining, selection.names_rebound
            outcome.rules = tuple(sorted({decision.rule for decision in selection.decisions}))
            (folder / "selection.txt").write_text("\n".join(selection.reasons) + "\n", encoding="utf-8")
            outcomes.append(outcome)
        return outcomes

    def compare_builds(self, outcomes: Sequence[Outcome]) -> float:
        """The gate's build comparison: the sampled cases each plant reached only while building are fingerprinted
        on base (once, all plants' together) and on the plant's copy; those that built the same leave the selection.
        A side without a fingerprint keeps the case in, as the gate does."""
        started = time.monotonic()
        wanted = sorted({case for outcome in outcomes for case in outcome.build_only})
        if not wanted:
            return 0.0
        base = self._fingerprints(wanted, self.out / "base-builds", None)
        for number, outcome in enumerate(outcomes):
            if not outcome.build_only:
                continue
            folder = self.out / f"plant-{number:02d}"
            head = self._fingerprints(outcome.build_only, folder / "head-builds", folder / "src")
            same, _ = builds_file.compare(outcome.build_only, base, head, outcome.tables_gaining, outcome.names_rebound)
            outcome.built_same = set(same)
            outcome.in_selection -= outcome.built_same
        return time.monotonic() - started

    def _fingerprints(self, cases: Sequence[str], folder: Path, python_path: Path | None) -> dict[str, dict]:
        path, _ = _run_cases(cases, folder, python_path, self.extra, fingerprints=True)
        try:
            return builds_file.read(path)
        except ValueError:
            return {}

    def run_base(self, outcomes: Sequence[Outcome], base_report: Path | None) -> float:
        started = time.monotonic()
        known: dict[str, str] = {}
        if base_report is not None:
            known = _verdicts(base_report)[0]
        wanted = sorted({case for outcome in outcomes for case in outcome.sample} - known.keys())
        if wanted:
            report, error = _run_cases(wanted, self.out / "base", None, self.extra)
            if error:
                raise ReportError(f"base: the run over {len(wanted)} case(s) wrote no report: {error}")
            known |= _verdicts(report)[0]
        for outcome in outcomes:
            outcome.base = {case: known[case] for case in outcome.sample if case in known}
        return time.monotonic() - started

    def run_head(self, number: int, outcome: Outcome) -> None:
        started = time.monotonic()
        folder = self.out / f"plant-{number:02d}"
        outcome.import_error = _import_error(self.package.name, folder / "src")
        report, error = _run_cases(outcome.sample, folder / "head", folder / "src", self.extra)
        outcome.seconds = time.monotonic() - started
        if error:
            outcome.error = error
            outcome.head = {case: "error" for case in outcome.sample}
            return
        outcome.head, raw = _verdicts(report)
        outcome.probe_misses = probe_misses(outcome.plant, outcome.head, raw)


def _import_error(package: str, python_path: Path) -> str:
    """The last line of what importing the planted package raised, or "" where it imports (the gate's own check)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(python_path), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", f"import {package}"], capture_output=True, text=True, env=env)
    lines = done.stderr.strip().splitlines()
    return (lines[-1] if lines else f"exit status {done.returncode}") if done.returncode else ""


def probe_misses(plant: Plant, verdicts: Mapping[str, str], records: Mapping[str, str]) -> list[str]:
    """The cases that passed although their record (JSON text) names the planted line of a plant that breaks."""
    if not plant.breaks:
        return []
    # The planted line, not one whose number starts with it (layer.py:25 is not layer.py:259).
    mark = re.compile(re.escape(f"{plant.path}:{plant.line}") + r"(?!\d)")
    return [case for case, status in verdicts.items() if status == "passed" and mark.search(records.get(case, ""))]


def summary(outcomes: Sequence[Outcome], seconds: Mapping[str, float]) -> str:
    rows = []
    for shape in SHAPES:
        mine = [o for o in outcomes if o.plant.shape == shape]
        if not mine:
            continue
        rows.append((shape, *_figures(mine)))
    rows.append(("all", *_figures(outcomes)))
    lines = [
        "| shape | plants | cases run | verdict changes | of them selected | misses | probe misses | recall |"
        " precision |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [f"| {' | '.join(str(cell) for cell in row)} |" for row in rows]
    compared = sum(len(o.build_only) for o in outcomes)
    same = sum(len(o.built_same) for o in outcomes)
    lines += [
        "",
        f"Builds compared (the gate's build comparison on the sampled cases reached only while building): {compared}"
        f" case(s), {same} built the same and left the selection.",
        f"CPU time: builds {seconds.get('builds', 0.0):.0f} s, base {seconds['base']:.0f} s, head {seconds['head']:.0f}"
        " s (wall, summed over runs)",
    ]
    for outcome in outcomes:
        for case in outcome.misses:
            base, head = outcome.base[case], outcome.head.get(case)
            how = "built the same, so left out" if case in outcome.built_same else "not selected"
            lines.append(
                f"- selection missed: {case} ({base} -> {head}; {how}) under {outcome.plant.name} in"
                f" {outcome.plant.where} (rules: {', '.join(outcome.rules) or 'none'})"
            )
        for case in outcome.probe_misses:
            lines.append(f"- probe missed: {case} passed though its report names {outcome.plant.name}")
        if outcome.import_error:
            lines.append(
                f"- under {outcome.plant.name} PEFT does not import ({outcome.import_error}): the gate fails such a"
                " head before any selection, so its verdict changes count as caught"
            )
        elif outcome.error:
            lines.append(f"- head's run under {outcome.plant.name} wrote no report: {outcome.error.splitlines()[-1]}")
    return "\n".join(lines) + "\n"


def _figures(outcomes: Sequence[Outcome]) -> tuple[object, ...]:
    run = sum(len(o.sample) for o in outcomes)
    changed = sum(len(o.changed) for o in outcomes)
    misses = sum(len(o.misses) for o in outcomes)
    probe = sum(len(o.probe_misses) for o in outcomes)
    selected_run = sum(len(o.in_selection) for o in outcomes)
    selected_changed = changed - misses
    recall = f"{selected_changed / changed:.0%}" if changed else "n/a"
    precision = f"{selected_changed / selected_run:.0%}" if selected_run else "n/a"
    return len(outcomes), run, changed, selected_changed, misses, probe, recall, precision


def _outcome_json(outcome: Outcome) -> dict[str, object]:
    plant = outcome.plant
    return {
        "plant": plant.name,
        "shape": plant.shape,
        "where": plant.where,
        "selected": "everything" if outcome.everything else outcome.selected,
        "rules": list(outcome.rules),
        "built_same": sorted(outcome.built_same),
        "cases": {
            case: {
                "base": outcome.base.get(case),
                "head": outcome.head.get(case),
                "selected": case in outcome.in_selection,
            }
            for case in outcome.sample
        },
        "misses": outcome.misses,
        "probe_misses": outcome.probe_misses,
        "head_seconds": round(outcome.seconds, 1),
        "error": outcome.error,
        "import_error": outcome.import_error,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gate_tools.recall", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the run's folder (plants, reports, summary.md)")
    parser.add_argument("--footprints", type=Path, default=Path("tests/footprints.json"))
    parser.add_argument("--plants", type=int, default=40, metavar="N", help="plants to draw (default 40)")
    parser.add_argument("--sample", type=int, default=6, metavar="N", help="cases run per plant (default 6)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shapes", default="", help="comma-separated shapes to draw from (default: every shape)")
    parser.add_argument("--jobs", type=int, default=1, help="head runs at once (default 1)")
    parser.add_argument(
        "--max-case-seconds",
        type=float,
        default=0.0,
        help="leave out cases tests/durations.json prices above this (default: none left out)",
    )
    parser.add_argument("--base-report", type=Path, help="base's verdicts from this report (same versions)")
    parser.add_argument("--durations", type=Path, default=Path("tests/durations.json"))
    args = parser.parse_args(argv)
    try:
        return _main(args)
    except (FootprintsError, ReportError, ValueError, OSError) as error:
        print(f"recall: {error}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace) -> int:
    if checkout.find() is None:
        raise ValueError(checkout.NOT_FOUND)
    footprints = load_footprints(args.footprints)
    package = _installed_package("peft")
    shapes = [s for s in args.shapes.split(",") if s] or list(SHAPES)
    unknown = set(shapes) - set(SHAPES)
    if unknown:
        raise ValueError(f"--shapes: no such shape {sorted(unknown)} (one of {', '.join(SHAPES)})")
    rng = random.Random(args.seed)
    sites = by_shape(Sites(package, footprints))
    # Twice as many as wanted, in the order drawn: an edit that does not compile (an insertion before an elif) is
    # replaced by the next one drawn.
    plants = draw_plants({shape: sites[shape] for shape in shapes}, 2 * args.plants, rng)
    pool = _pool(footprints, args.durations, args.max_case_seconds)
    args.out.mkdir(parents=True, exist_ok=True)
    harness = Harness(footprints, package, args.out)
    outcomes = harness.plan(plants, args.plants, args.sample, pool, rng)
    seconds = {"builds": harness.compare_builds(outcomes)}
    seconds["base"] = harness.run_base(outcomes, args.base_report)
    started = time.monotonic()
    with ThreadPoolExecutor(max(1, args.jobs)) as pool_of_runs:
        list(pool_of_runs.map(lambda pair: harness.run_head(*pair), enumerate(outcomes)))
    seconds["head"] = sum(outcome.seconds for outcome in outcomes) or time.monotonic() - started
    text = summary(outcomes, seconds)
    (args.out / "summary.md").write_text(text, encoding="utf-8")
    (args.out / "plants.json").write_text(
        json.dumps([_outcome_json(o) for o in outcomes], indent=1) + "\n", encoding="utf-8"
    )
    print(text, end="")
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_file:
        with open(summary_file, "a", encoding="utf-8") as handle:
            handle.write(f"## Selection recall (seed {args.seed})\n\n{text}")
    return 1 if any(o.misses or o.probe_misses for o in outcomes) else 0


def _pool(footprints: Footprints, durations: Path, limit: float) -> list[str]:
    if not limit:
        return list(footprints.cases)
    priced: dict[str, float] = {}
    for node, seconds in json.loads(durations.read_text(encoding="utf-8")).items():
        case = node.rpartition("[")[2].rstrip("]")
        priced[case] = priced.get(case, 0.0) + seconds
    return [case for case in footprints.cases if priced.get(case, limit + 1) <= limit]

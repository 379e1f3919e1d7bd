"""What the gate runs: the selection of a change (compile_audit.selection), written to OUT/selection.md and
selection.json, the builds compared before running the cases reached only while building, and the changes no case
runs (not-judged.md)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from compile_audit.selection import builds_file
from compile_audit.selection.change_selection import Selection, select_between
from compile_audit.selection.footprints_file import Footprints, FootprintsError
from compile_audit.selection.footprints_file import load as load_footprints
from gate_tools import why
from gate_tools.gate_args import EXIT_OK, EXIT_REGRESSION, REPO, GateError, Options
from gate_tools.sides import Shell, Side, failed_cases, pytest_command, read_report, say, shown


@dataclasses.dataclass(frozen=True)
class Chosen:
    """What both sides may run: pytest arguments, and how many cases (None: not known before the run)."""

    args: list[str]
    cases: int | None
    lines: list[str]
    listed: tuple[str, ...] = ()  # the cases the listing (--cases=FILE) holds
    build_only: tuple[str, ...] = ()  # of those, the ones to compare builds of before running them
    tables_gaining: tuple[str, ...] = ()  # the tables the change adds keys to (Selection.tables_gaining)
    names_rebound: tuple[str, ...] = ()  # module-level names the change binds anew (Selection.names_rebound)
    unjudged: tuple[str, ...] = ()  # the changes no recorded case runs (Selection.unjudged)


def choose_selection(opts: Options, sources: tuple[Path, Path] | None) -> Chosen:
    """The pytest arguments of the selection, with what it chose and why in OUT/selection.md."""
    if opts.select == "default":
        chosen = Chosen([], None, ["--select default: the default run"])
    elif opts.select == "full":
        chosen = Chosen(["--full-matrix"], None, ["--select full: the full matrix"])
    else:
        assert sources is not None
        chosen = _selection_by_change(opts, *sources)
    if opts.shard is not None and chosen.cases != 0:
        group, splits = opts.shard
        durations = REPO / "tests" / "durations.json"
        chosen.args.extend(["--splits", str(splits), "--group", str(group), "--durations-path", str(durations)])
        chosen.lines.append(f"shard {group} of {splits} of that selection (pytest-split, by tests/durations.json)")
    if chosen.unjudged:
        chosen.lines.append(f"not judged: {len(chosen.unjudged)} change(s) that no recorded case runs ({NOT_JUDGED})")
    for line in chosen.lines:
        say(f"selection: {line}")
    (opts.out / "selection.md").write_text("".join(f"- {line}\n" for line in chosen.lines), encoding="utf-8")
    if chosen.unjudged:
        text = "".join(f"- {reason.strip()}\n" for reason in chosen.unjudged)
        heading = f"## Not judged: changed code no compile case runs ({len(chosen.unjudged)})"
        (opts.out / NOT_JUDGED).write_text(f"\n{heading}\n\n{text}", encoding="utf-8")
    return chosen


NOT_JUDGED = "not-judged.md"  # the changes no case runs, appended to diff.md whatever the verdict


def note_unjudged(opts: Options, status: int) -> int:
    """diff.md ends with the changed code no case runs: a green verdict says what it could not see."""
    listing = opts.out / NOT_JUDGED
    if status in (EXIT_OK, EXIT_REGRESSION) and listing.is_file():
        with (opts.out / "diff.md").open("a", encoding="utf-8") as diff:
            diff.write(listing.read_text(encoding="utf-8"))
        say(f"not judged: the changed code no compile case runs is listed at the end of {shown(opts.out / 'diff.md')}")
    return status


def _selection_by_change(opts: Options, base_source: Path, head_source: Path) -> Chosen:
    footprints, selection = _select(opts, base_source, head_source)
    why.write_selection(opts.out, selection)
    return dataclasses.replace(_chosen_by_change(opts, footprints, selection), unjudged=selection.unjudged)


def _select(opts: Options, base_source: Path, head_source: Path) -> tuple[Footprints, Selection]:
    if not opts.footprints.is_file():
        raise GateError(f"--select change: no footprints file {opts.footprints} (or choose --select default|full)")
    try:
        footprints = load_footprints(opts.footprints)
        selection: Selection = select_between(footprints, base_source, head_source)
    except FootprintsError as error:
        raise GateError(f"--select change: {error}") from None
    recorded = getattr(footprints, "versions", {}).get("peft")
    base_version = _source_version(base_source)
    if recorded and base_version and recorded != base_version:
        say(f"selection: note: the footprints were recorded on peft {recorded}, base is {base_version}")
    return footprints, selection


def _chosen_by_change(opts: Options, footprints: Footprints, selection: Selection) -> Chosen:
    if selection.nothing_executes_differently:
        return Chosen(
            [],
            0,
            [
                "no executed PEFT code differs between base and head (docstrings, comments, formatting"
                " and annotations do not count): no compile case to run"
            ],
        )
    lines = [
        f"{len(selection.changed_files)} PEFT file(s) differ in executed code:",
        *(f"  {reason}{_rule_of(selection, reason)}" for reason in selection.reasons),
    ]
    if selection.everything:
        return Chosen(["--full-matrix"], None, [*lines, "so the full matrix runs"])
    new = ["--new-cases"] if selection.new_cases else []
    also_new = ", and the new cases (those of a method base lacks: --new-cases)" if new else ""
    if not selection.cases:
        if new:
            return Chosen(new, None, [*lines, "so only the new cases run (those of a method base lacks: --new-cases)"])
        return Chosen([], 0, [*lines, "so no recorded case ran the changed code: no compile case to run"])
    audit = audit_sample(opts, footprints, selection)
    cases = opts.out / "selected-cases.txt"
    cases.write_text("".join(f"{case}\n" for case in (*selection.cases, *audit)), encoding="utf-8")
    summary = f"so {len(selection.cases)} case(s) run ({shown(cases)}){also_new}"
    if audit:
        summary += f", and {len(audit)} it did not select, to audit the selection ({shown(opts.out / AUDIT_CASES)})"
    total = len(selection.cases) + len(audit)
    if selection.build_only:
        summary += (
            f"; {len(selection.build_only)} of them ran the changed code only while building their model: their"
            " builds are compared first"
        )
    listed = (*selection.cases, *audit)
    return Chosen(
        [f"--cases={cases}", *new],
        None if new else total,
        [*lines, summary],
        listed,
        selection.build_only,
        selection.tables_gaining,
        selection.names_rebound,
    )


def _rule_of(selection: Selection, reason: str) -> str:
    """`` [rule ID]``: the selection rule that gave this reason (blank where the selection names none)."""
    rules = {decision.reason: decision.rule for decision in selection.decisions}
    return f" [rule {rules[reason]}]" if reason in rules else ""


def compare_builds(shell: Shell, sides: tuple[Side, Side], snapshot: Path, opts: Options, chosen: Chosen) -> Chosen:
    """Both sides build the cases the change reaches only while building, up to their first compile
    (``pytest --build-fingerprints``); those whose builds are equal leave the selection, the others stay, each with
    why (selection.md). A side that cannot fingerprint leaves every case in."""
    listing = opts.out / "build-cases.txt"
    listing.write_text("".join(f"{case}\n" for case in chosen.build_only), encoding="utf-8")
    found = []
    for side in sides:
        path = opts.out / f"{side.name}-builds.json"
        log = opts.out / f"{side.name}-builds.log"
        say(f"{side.name}: fingerprinting {len(chosen.build_only)} build(s) (log: {shown(log)})")
        cmd = [*pytest_command(side), f"--build-fingerprints={path}", f"--cases={listing}", *opts.pytest_args]
        status = shell.run(cmd, log=log, env=side.env(snapshot), cwd=snapshot)
        try:
            found.append(builds_file.read(path) if status == 0 else {})
        except ValueError:
            found.append({})
    same, run = builds_file.compare(chosen.build_only, *found, chosen.tables_gaining, chosen.names_rebound)
    why.write_builds(opts.out, same, run)
    gained = [case for case in same if not builds_file.same_build(found[0].get(case), found[1].get(case))]
    lines = [f"builds compared for {len(chosen.build_only)} case(s): {len(same)} built the same (not run)"]
    if gained:
        lines[0] += (
            f", {len(gained)} of them but for what the change adds (keys of"
            f" {', '.join(chosen.tables_gaining) or 'no table'}, names base did not bind or the change binds anew),"
            " whose readers the selection selects on its own"
        )
    lines += [f"  runs: {case}: {why}" for case, why in sorted(run.items())[:20]]
    lines += [f"  ... {len(run) - 20} more (see {shown(opts.out / 'build-cases.txt')})"] if len(run) > 20 else []
    for line in lines:
        say(f"selection: {line}")
    with (opts.out / "selection.md").open("a", encoding="utf-8") as selection_md:
        selection_md.write("".join(f"- {line}\n" for line in lines))
    if not same:
        return chosen
    kept = tuple(case for case in chosen.listed if case not in set(same))
    cases = opts.out / "selected-cases.txt"
    cases.write_text("".join(f"{case}\n" for case in kept), encoding="utf-8")
    args = [arg for arg in chosen.args if not arg.startswith("--cases=")]
    args = [f"--cases={cases}", *args] if kept else args
    count = None if "--new-cases" in args else len(kept)
    return Chosen(args, count, [*chosen.lines, *lines], kept, ())


AUDIT_CASES = "audit-cases.txt"


def audit_sample(opts: Options, footprints: Footprints, selection: Selection) -> list[str]:
    """``--audit-selection N``: N recorded cases the selection left out, drawn with ``--audit-seed``."""
    if not opts.audit_selection:
        return []
    left_out = sorted(set(footprints.cases) - set(selection.cases))
    sample = sorted(random.Random(opts.audit_seed).sample(left_out, min(opts.audit_selection, len(left_out))))
    (opts.out / AUDIT_CASES).write_text("".join(f"{case}\n" for case in sample), encoding="utf-8")
    return sample


def selection_misses(opts: Options, base: Side | None, head: Side) -> list[str]:
    """The audited cases (outside the selection) whose verdict head changed: head failed where base did not."""
    listing = opts.out / AUDIT_CASES
    if not listing.exists():
        return []
    audited = set(listing.read_text(encoding="utf-8").split())
    failed = {case for case in failed_cases(head) if case in audited}
    if not failed or base is None or not base.report.exists():
        return sorted(failed) if base is None else []
    on_base = {case.id: case.status for case in read_report(base).cases}
    return sorted(case for case in failed if on_base.get(case) not in ("failed", "error"))


def _source_version(package: Path) -> str | None:
    """The version pip installed beside a fetched package (its dist-info), without importing it."""
    for info in package.parent.glob(f"{package.name}-*.dist-info"):
        return info.name.removesuffix(".dist-info").split("-", 1)[1]
    return None

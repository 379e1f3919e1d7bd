"""The compile gate, run locally: what a change to PEFT selects, run on head, and on base only where the verdict
needs it, then the diff.

    peft-compile-gate --base peft==0.21.2 --head ~/src/peft --out out/gate -- -k "llama-tiny and lora"
    scripts/gate ...    # the same from a checkout, nothing installed

First both PEFT SPECs are fetched without their dependencies (anything pip installs: ``peft==0.21.2``, a local
path, ``git+https://github.com/huggingface/peft@<ref>``), and the selection is computed from their source
(``--select change``: the cases that ran a function whose executed code differs,
compile_audit.selection.change_selection).
A change that selects no case ends there, with exit 0 and the reason, before any virtualenv is built.

Head then runs the selection in a fresh virtualenv with torch (``--torch``, default: the torch version of the
Python running this script), this gate's dependencies with transformers pinned to the version the budgets were
recorded with and the pins of tests/install_pins.txt (``--unpinned`` lifts both), and head's PEFT. When head's
installed versions are the budgets' own, a case head passes cannot have regressed (the budgets judged it), so base
runs only the cases head failed; on other versions base runs the whole selection. Base gets the same torch and pins.
Both sides run a snapshot of this checkout taken at the start, with their own inductor cache, and write into OUT:
``base.json``/``head.json`` (compile reports), ``base.log``/``head.log`` (pytest), ``*-install.log`` (pip),
``*-environment.txt`` (pip freeze), ``selection.md``, ``head-matrix.md`` and ``diff.md`` (python -m
compile_audit.artifacts.diff). Nothing is installed into the calling Python and nothing is written into the
checkout.

Exit status: 0 when nothing regressed, 1 when head regressed, 2 for the gate's own failure (bad arguments, an install
failure, an unusable report, a report in which no case ran to a verdict: the GPU tier without CUDA), with the reason
on one line of stderr. Cases that fail on both sides alike are no regression, at setup included: the verdict is
given on what could be compared, and diff.md names what could not (those cases, the ones skipped on head, the
selected ones with no record).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from compile_audit.artifacts.diff import NotJudged, lonely_lines, not_judged_lines, not_judged_summary
from compile_audit.rules.budgets import BudgetFile, BudgetFileError
from gate_tools import why
from gate_tools.gate_args import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_REGRESSION,
    PROG,
    REPO,
    GateError,
    Options,
    is_path,
    is_url,
    parse_args,
)
from gate_tools.gate_selection import (
    NOT_JUDGED,
    Chosen,
    choose_selection,
    compare_builds,
    note_unjudged,
    selection_misses,
)
from gate_tools.head_only_roots import DecidedOnHead, base_is_recorded_release, decided_on_head, decided_section
from gate_tools.sides import (
    NOTHING_COLLECTED,
    Shell,
    Side,
    check_report,
    failed_cases,
    fetch_source,
    import_error,
    install,
    install_pins,
    installed_versions,
    new_cases,
    pytest_jobs,
    read_report,
    recorded_versions,
    rerun_failed,
    run_suite,
    say,
    shown,
)

# Never copied into the snapshot: version control and caches anywhere, build and run output at the top (and
# any virtualenv, see snapshot_checkout).
SNAPSHOT_SKIP = {".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".benchmarks"}


SNAPSHOT_SKIP_TOP = {"build", "out"}


def head_does_not_import(opts: Options, why: str) -> int:
    """The pull request's fault, as any other regression: exit 1, the error in the summary and in diff.md."""
    text = f"# Compile gate\n\n**Head's PEFT does not import**: {why}. No compile case can run on it.\n"
    (opts.out / "diff.md").write_text(text, encoding="utf-8")
    say(f"head regressed: its PEFT does not import: {why} (diff: {shown(opts.out / 'diff.md')})")
    return EXIT_REGRESSION


def snapshot_checkout(dest: Path, skip: Sequence[Path]) -> Path:
    """Copy this checkout to dest: both sides run the same gate code, and the checkout gets no writes."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        here = Path(directory)
        return {
            name
            for name in names
            if name in SNAPSHOT_SKIP
            or (here == REPO and name in SNAPSHOT_SKIP_TOP)
            or name.endswith(".egg-info")
            or (here / name / "pyvenv.cfg").exists()  # any virtualenv
            or (here / name).resolve() in skip
        }

    shutil.copytree(REPO, dest, ignore=ignore, symlinks=True)
    return dest


def _clear_outputs(out: Path) -> None:
    """Remove what an earlier run left in out: a stale report must never stand in for a missing one."""
    for side in ("base", "head"):
        for suffix in (".json", ".log", "-install.log", "-environment.txt", "-failed-cases.log", "-matrix.md"):
            (out / f"{side}{suffix}").unlink(missing_ok=True)
    for name in (
        "diff.md",
        "selection.md",
        "selected-cases.txt",
        "selected-unrecorded-on-head.txt",
        "base-cases.txt",
        "head-compared.json",
        why.SELECTION,
        why.BUILDS,
        NOT_JUDGED,
    ):
        (out / name).unlink(missing_ok=True)
    shutil.rmtree(out / "torch-trace", ignore_errors=True)


def run_diff(
    shell: Shell, base: Side, head: Side, snapshot: Path, opts: Options, head_report: Path, selected: Path | None = None
) -> int:
    """The diff, into diff.md (printed); ``selected``: the list of the cases pytest ran, for the diff to name those
    with no record on either side."""
    out = opts.out / "diff.md"
    cmd = [head.python, "-m", "compile_audit.artifacts.diff", base.report, head_report, "--output", out]
    cmd += ["--selected", selected] if selected is not None else []
    status, _, stderr = shell.capture(
        [*cmd, *(["--chart"] if opts.chart else [])], env=head.env(snapshot), cwd=snapshot
    )
    if status not in (EXIT_OK, EXIT_REGRESSION):
        detail = " ".join((stderr.strip().splitlines() or ["no message"])[-1].split())
        raise GateError(f"diff: python -m compile_audit.artifacts.diff exited {status}: {detail}")
    if out.exists():
        sys.stdout.write(out.read_text(encoding="utf-8"))
    return status


def write_matrix(shell: Shell, head: Side, snapshot: Path) -> None:
    """Head's compatibility matrix, for the step summary; a missing matrix is worth a note, not a verdict."""
    out = head.out / "head-matrix.md"
    cmd = [head.python, "-m", "compile_audit.artifacts.matrix", head.report, "--output", out]
    status, _, stderr = shell.capture(cmd, env=head.env(snapshot), cwd=snapshot)
    if status != 0:
        say(f"note: no compatibility matrix: {(stderr.strip().splitlines() or ['no message'])[-1]}")


def _same_torch(spec: str, installed: str) -> str:
    """What head installs: exactly base's torch (the same file, or the version base got, local label included)."""
    return spec if is_url(spec) or is_path(spec) else f"torch=={installed}"


def _work_dir(opts: Options) -> tuple[Path, bool]:
    """The directory for venvs and caches, and whether the gate removes it at the end."""
    if opts.work_dir is None:
        return Path(tempfile.mkdtemp(prefix="compile-gate-")), True
    if opts.work_dir.exists() and any(opts.work_dir.iterdir()):
        raise GateError(f"--work-dir {opts.work_dir} is not empty (the venvs must be fresh)")
    opts.work_dir.mkdir(parents=True, exist_ok=True)
    return opts.work_dir, False


def regressed_on_head(
    opts: Options, head: Side, failed_new: Sequence[str], decided: Sequence[DecidedOnHead] = ()
) -> int:
    """Head's verdict where base has nothing to add: new cases that fail (base has none of them) and cases decided on
    head (a root at a line base lacks, head_only_roots). diff.md lists each with its roots at their lines, as the diff
    does for a case only head has."""
    records = {case.id: case for case in read_report(head).cases}
    lines, what = [], []
    if failed_new:
        lines += lonely_lines(
            "New cases that fail", [(records[case], True) for case in failed_new], "new case outside its budget"
        )
        what.append("new cases, of a method base lacks, fail")
    if decided:
        lines += decided_section(list(decided))
        what.append("breaks at lines base does not have")
    text = f"# Compile gate\n\nHead regressed: {'; '.join(what)}.\n" + "\n".join(lines) + "\n"
    (opts.out / "diff.md").write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    say(f"head regressed (diff: {shown(opts.out / 'diff.md')})")
    return EXIT_REGRESSION


def decide_on_head(head: Side, snapshot: Path, base_package: Path, failing: Sequence[str]) -> list[DecidedOnHead]:
    """The failed cases head alone decides (head_only_roots), said; base runs the rest."""
    path = snapshot / "tests" / "compile_budgets.toml"
    try:
        budgets = BudgetFile.load(path)
    except (OSError, BudgetFileError) as error:
        raise GateError(f"{path}: unreadable budgets file: {error}") from None
    records = read_report(head).by_id
    decided = decided_on_head((records[case] for case in failing if case in records), base_package, budgets)
    if decided:
        say(
            f"head: {len(decided)} of the {len(failing)} failed case(s) break at a line base's PEFT does not have,"
            " outside their budget: regressions without a base run"
        )
    return decided


def write_compared_head(head: Side, base_cases: Sequence[str]) -> Path:
    """Head's report cut to the cases base ran, as it was written: the diff compares like with like. Head's skipped
    cases stay, for the diff to name as not judged."""
    report = read_report(head)
    wanted = set(base_cases) | {case.id for case in report.cases if case.status == "skipped"}
    data = {**report.data, "cases": [case for case in report.data["cases"] if case["id"] in wanted]}
    path = head.out / "head-compared.json"
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path


def unrecorded_on_head(opts: Options, head: Side, selected: Path) -> Path:
    """The selected cases head's whole report does not hold: where base ran only head's failures, the diff sees head's
    report cut to those, and the cases head passed (judged by the budgets alone) must not read as never run."""
    recorded = {case.id for case in read_report(head).cases}
    path = opts.out / "selected-unrecorded-on-head.txt"
    cases = [case for case in selected.read_text(encoding="utf-8").split() if case not in recorded]
    path.write_text("".join(f"{case}\n" for case in cases), encoding="utf-8")
    return path


def _no_run(opts: Options, why: str, not_judged: NotJudged | None = None) -> int:
    """Exit 0 without a diff, saying why, and what head alone did not judge."""
    not_judged = not_judged or NotJudged()
    why += f"; {not_judged_summary(not_judged)}" if not_judged else ""
    listed = "".join(f"{line}\n" for line in not_judged_lines(not_judged))
    (opts.out / "diff.md").write_text(f"# Compile gate\n\nNothing regressed: {why}.\n{listed}", encoding="utf-8")
    say(f"no regression: {why} (diff: {shown(opts.out / 'diff.md')})")
    return EXIT_OK


def selected_exactly(opts: Options, chosen: Chosen) -> tuple[str, ...]:
    """The cases pytest runs where the gate knows them: its own list (--cases), with no shard and no pytest args of
    the caller's, which may deselect some; () where it cannot know. One that no report holds could not run."""
    if opts.shard is not None or opts.pytest_args or not any(arg.startswith("--cases=") for arg in chosen.args):
        return ()
    return chosen.listed


def not_judged_on_head(head: Side, selected: Sequence[str]) -> NotJudged:
    """Where head alone decides (it passed everything else): the cases it skipped, and the selected ones it has no
    record of."""
    cases = read_report(head).by_id
    skipped = [case for case_id, case in sorted(cases.items()) if case.status == "skipped"]
    return NotJudged(skipped=skipped, no_record=sorted(set(selected) - cases.keys()))


def gate(opts: Options, shell: Shell, work: Path) -> int:
    opts.out.mkdir(parents=True, exist_ok=True)
    _clear_outputs(opts.out)
    snapshot = snapshot_checkout(work / "gate", skip=[opts.out, work])
    base = Side("base", opts.base, opts.out, work / "base")
    head = Side("head", opts.head, opts.out, work / "head")
    for side in (base, head):
        side.work.mkdir(parents=True)
    # Whatever --select: the fetch is the check of both SPECs, seconds before anything heavy.
    sources = (fetch_source(shell, base), fetch_source(shell, head))
    chosen = choose_selection(opts, sources)
    if chosen.cases == 0:
        return _no_run(opts, "the change selects no compile case (selection.md)")
    recorded = recorded_versions(snapshot)
    pins = [] if opts.unpinned or "transformers" not in recorded else [f"transformers=={recorded['transformers']}"]
    pins += [] if opts.unpinned else install_pins(snapshot)
    torch_version, _ = install(shell, head, opts, snapshot, opts.torch, pins)
    base_installed = False
    if chosen.build_only:
        install(shell, base, opts, snapshot, _same_torch(opts.torch, torch_version), pins)
        base_installed = True
        chosen = compare_builds(shell, (base, head), snapshot, opts, chosen)
        if chosen.cases == 0:
            return _no_run(opts, "every case the change selected built the same model on both sides (selection.md)")
    jobs = pytest_jobs(opts, chosen.cases)
    only_new = chosen.args == ["--new-cases"]
    try:
        head_status = run_suite(shell, head, snapshot, opts, [*chosen.args, *jobs], may_be_empty=only_new)
    except GateError:
        why = import_error(shell, head, snapshot)
        if why is not None:
            return head_does_not_import(opts, why)
        raise
    if head_status == NOTHING_COLLECTED:
        return _no_run(opts, "no recorded case ran the changed code, and head adds no method the registry lacks")
    audited = check_report(head, shard=opts.shard is not None)
    say(f"head: {audited} case(s) audited")
    if head_status == 1 and opts.rerun_failed:
        rerun_failed(shell, head, snapshot, opts, chosen.args)
    write_matrix(shell, head, snapshot)
    added = new_cases(head)
    if added:
        say(
            f"head: {len(added)} new case(s), of a method base lacks, judged on head alone: {', '.join(added[:6])}"
            + (", ..." if len(added) > 6 else "")
        )
    installed = installed_versions(shell, head, snapshot, ["torch", "transformers"])
    on_recorded = all(installed.get(name) == recorded.get(name) for name in ("torch", "transformers"))
    failed = failed_cases(head)  # one read of head's report
    failed_new = [case for case in failed if case in added]
    decided: list[DecidedOnHead] = []
    if on_recorded:
        failing = [case for case in failed if case not in added]
        if failing and base_is_recorded_release(sources[0], recorded):
            decided = decide_on_head(head, snapshot, sources[0], failing)
            failing = [case for case in failing if case not in {item.case.id for item in decided}]
        if (failed_new or decided) and not failing:
            parts = [f"{len(failed_new)} new case(s) failed, which base lacks"] if failed_new else []
            parts += [f"{len(decided)} case(s) broke at a line base does not have"] if decided else []
            say(f"base: not run: {'; '.join(parts)}")
            return regressed_on_head(opts, head, failed_new, decided)
        if not failing:
            return _no_run(
                opts,
                f"head passed all {audited} audited case(s) against the budgets, on the versions they"
                " were recorded with (base not needed)",
                not_judged_on_head(head, selected_exactly(opts, chosen)),
            )
        listing = opts.out / "base-cases.txt"
        listing.write_text("".join(f"{case}\n" for case in failing), encoding="utf-8")
        say(
            f"base: only the {len(failing)} case(s) head failed ({shown(listing)}): a failure on base too is no"
            " regression"
        )
        base_args = [f"--cases={listing}", *pytest_jobs(opts, len(failing))]
    else:
        differ = ", ".join(f"{n} {installed.get(n)} (recorded {recorded.get(n)})" for n in ("torch", "transformers"))
        say(f"base: the whole selection: installed versions are not the budgets' own ({differ})")
        failing, base_args = None, [*chosen.args, *jobs]
    if not base_installed:
        install(shell, base, opts, snapshot, _same_torch(opts.torch, torch_version), pins)
    run_suite(shell, base, snapshot, opts, base_args)
    say(f"base: {check_report(base, shard=True)} case(s) audited")
    # Head's new cases that failed are compared too: base lacks them, so the diff lists them as only head's.
    compared = write_compared_head(head, [*failing, *failed_new]) if failing is not None else head.report
    selected = opts.out / "selected-cases.txt" if selected_exactly(opts, chosen) else None  # chosen.listed
    if selected is not None and failing is not None:
        selected = unrecorded_on_head(opts, head, selected)
    status = run_diff(shell, base, head, snapshot, opts, compared, selected)
    missed = selection_misses(opts, base, head)
    if missed:
        text = "".join(
            f"- selection missed: **{case}** changed its verdict, and the change did not select it\n" for case in missed
        )
        with (opts.out / "diff.md").open("a", encoding="utf-8") as diff:
            diff.write(f"\n## Selection missed ({len(missed)})\n\n{text}")
        say(f"selection missed {len(missed)} case(s) whose verdict changed: {', '.join(missed)}")
        status = EXIT_REGRESSION
    if decided:
        with (opts.out / "diff.md").open("a", encoding="utf-8") as diff:
            diff.write("\n".join(decided_section(decided)) + "\n")
        status = EXIT_REGRESSION
    verdict = "head regressed" if status == EXIT_REGRESSION else "no regression"
    say(f"{verdict} (diff: {shown(opts.out / 'diff.md')})")
    return status


def main(argv: Sequence[str] | None = None, shell: Shell | None = None, prog: str = PROG) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(arg == "--why" or arg.startswith("--why=") for arg in argv):
        return why.main(argv, prog)
    try:
        opts = parse_args(argv, prog)
        work, temporary = _work_dir(opts)
        try:
            return note_unjudged(opts, gate(opts, shell or Shell(), work))
        finally:
            if temporary:
                shutil.rmtree(work, ignore_errors=True)
    except GateError as error:
        print(f"gate: {' '.join(str(error).split())}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("gate: interrupted", file=sys.stderr)
        return EXIT_ERROR
    except Exception as error:  # exit 1 means a regression and nothing else
        print(f"gate: {type(error).__name__}: {' '.join(str(error).split())}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())

"""Which cases this run parametrizes: the zoo's selection options (``--full-matrix``, ``--cpu-backend``,
``--with-cases``, ``--cases``, ``--new-cases``, ``--fake-tensor-cache``) and the parametrization of every test marked
with a scenario."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cases import CPU_BACKENDS, Case, all_case_ids, cases_for

WITH_CASES = pytest.StashKey[frozenset]()
ONLY_CASES = pytest.StashKey[frozenset]()
NEW_CASES = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compile gate: zoo")
    group.addoption("--full-matrix", action="store_true", help="every method on every architecture")
    group.addoption("--cpu-backend", default="eager", help=f"backend of the CPU tier, one of {', '.join(CPU_BACKENDS)}")
    group.addoption(
        "--with-cases",
        metavar="FILE",
        help="the default selection plus these full-matrix cases (one id per line; scripts/gate --select change)",
    )
    group.addoption(
        "--cases",
        metavar="FILE",
        help="only these cases, from the full matrix (one id per line), and no other test (scripts/gate)",
    )
    group.addoption(
        "--new-cases",
        action="store_true",
        help="the default run's cases of a method the registry does not know yet (derived from the installed PEFT: a"
        " pull request's new method), and no other test but those of --cases (scripts/gate)",
    )
    group.addoption(
        "--fake-tensor-cache",
        action="store_true",
        help="keep Dynamo's fake-tensor cache on for CPU-tier cases too (their compile seconds then read as a user's)",
    )
    group.addoption(
        "--compile-regions",
        action="store_true",
        help="compile each repeated block (decoder layer) once instead of the whole model; recorded in each case's"
        " policy (the budgets are recorded whole: use it for the step benchmarks and their tables)",
    )


def pytest_configure(config: pytest.Config) -> None:
    backend = config.getoption("--cpu-backend")
    if backend not in CPU_BACKENDS:
        raise pytest.UsageError(f"--cpu-backend: {backend!r} is not one of {', '.join(CPU_BACKENDS)}")
    config.stash[WITH_CASES] = _case_ids("--with-cases", config.getoption("--with-cases"))
    config.stash[ONLY_CASES] = _case_ids("--cases", config.getoption("--cases"))
    config.stash[NEW_CASES] = config.getoption("--new-cases")


def _case_ids(option: str, path: str | None) -> frozenset[str]:
    """The ids of a cases FILE; an id no run could produce is a usage error naming its line."""
    if not path:
        return frozenset()
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise pytest.UsageError(f"{option}: cannot read {path}: {error}") from None
    known, ids = all_case_ids(), set()
    for number, line in enumerate(lines, 1):
        case_id = line.split("#", 1)[0].strip()
        if case_id and case_id not in known:
            raise pytest.UsageError(f"{option}: {path}:{number}: {case_id!r} is no case of this suite")
        if case_id:
            ids.add(case_id)
    return frozenset(ids)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("scenario")
    if marker is None or "case" not in metafunc.fixturenames:
        return
    config = metafunc.config
    only, new = config.stash[ONLY_CASES], config.stash[NEW_CASES]
    backend = config.getoption("--cpu-backend")
    cases = cases_for(
        marker.args[0],
        full_matrix=config.getoption("--full-matrix") or bool(only),
        cpu_backend=backend,
        with_cases=config.stash[WITH_CASES],
    )
    cases = [case for case in cases if case.id in only] if only or new else cases
    if new:
        chosen = {case.id for case in cases}
        default = cases_for(marker.args[0], full_matrix=False, cpu_backend=backend)
        cases += [c for c in default if c.judged_by_causes and c.tier == "cpu" and c.id not in chosen]
    params = [pytest.param(c, id=c.id, marks=_marks(c)) for c in cases]
    metafunc.parametrize("case", params)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--cases FILE (and --new-cases) runs those cases and nothing else."""
    if not (config.stash[ONLY_CASES] or config.stash[NEW_CASES]):
        return
    others = [
        item
        for item in items
        if not isinstance(getattr(item, "callspec", None) and item.callspec.params.get("case"), Case)
    ]
    if others:
        config.hook.pytest_deselected(items=others)
        items[:] = [item for item in items if item not in others]


def _marks(case: Case) -> list[pytest.MarkDecorator]:
    if case.tier == "cuda":
        return [pytest.mark.gpu]
    return [pytest.mark.inductor] if case.backend == "inductor" else []

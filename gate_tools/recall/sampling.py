"""Which plants and which cases a recall run draws: seeded, spread over shapes, and over methods, scenarios and
models."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from compile_audit.case_ids import CaseId

from .sites import Plant

# Where compiled code runs: half of each shape's draws come from these functions, so that a run of a few dozen
# plants holds plants whose cases change verdict (most of PEFT runs once, eagerly, while a model is built).
_COMPILED_HINTS = ("forward", "get_delta_weight", "_mixed_batch", "get_prompt", "scaling", "_cast_input_dtype")


def _compiled(plant: Plant) -> bool:
    return plant.path.endswith("/layer.py") or any(hint in plant.where for hint in _COMPILED_HINTS)


def draw_plants(by_shape: Mapping[str, Sequence[Plant]], count: int, rng: random.Random) -> list[Plant]:
    """``count`` plants, the shapes taken in turn (a shape with no site is passed over), without repeats."""
    pools = {shape: list(plants) for shape, plants in by_shape.items() if plants}
    chosen: list[Plant] = []
    while len(chosen) < count and pools:
        for shape in list(pools):
            if len(chosen) == count:
                break
            pool = pools[shape]
            hot = [plant for plant in pool if _compiled(plant)]
            plant = rng.choice(hot if hot and rng.random() < 0.5 else pool)
            pool.remove(plant)
            chosen.append(plant)
            if not pool:
                del pools[shape]
    return chosen


def stratified(cases: Iterable[str], count: int, rng: random.Random) -> list[str]:
    """``count`` cases, each the one whose method, scenario and model have been drawn least so far (ties at
    random)."""
    pool = sorted(cases)
    rng.shuffle(pool)
    drawn: list[str] = []
    seen: Counter[tuple[str, str]] = Counter()
    while pool and len(drawn) < count:
        parts = [_parts(case) for case in pool]
        best = min(range(len(pool)), key=lambda i: sum(seen[part] for part in parts[i]))
        case = pool.pop(best)
        drawn.append(case)
        seen.update(_parts(case))
    return drawn


def _parts(case: str) -> tuple[tuple[str, str], ...]:
    identity = CaseId.parse(case)
    return (("method", identity.method), ("scenario", identity.scenario), ("model", identity.model))


def sample_cases(
    pool: Sequence[str],
    selected: frozenset[str],
    ran_planted: frozenset[str],
    count: int,
    rng: random.Random,
) -> list[str]:
    """Half from the selection, the rest from what it left out: first the cases that ran the planted function
    (the selection's narrowing left them out), then any."""
    inside = [case for case in pool if case in selected]
    outside = [case for case in pool if case not in selected]
    drawn = stratified(inside, count // 2 if outside else count, rng)
    near = [case for case in outside if case in ran_planted]
    drawn += stratified(near, (count - len(drawn) + 1) // 2, rng)
    rest = [case for case in outside if case not in drawn]
    drawn += stratified(rest, count - len(drawn), rng)
    if len(drawn) < count:  # the selection left too few out: more of it
        drawn += stratified([case for case in inside if case not in drawn], count - len(drawn), rng)
    return sorted(drawn)

"""The budgets file: the most graph breaks and recompiles each case may have, and why.

Format (TOML, one table per cause and per case, diff-friendly; nothing in it holds a line number)::

    [versions.cpu]                  # versions the budgets were recorded with, per tier
    torch = "2.13.0+cpu"

    [causes.dora-dequantize]        # an upstream cause, explained once (compile_audit.rules.causes)
    note = "DoRA reads the base weight through dequantize_module_weight, ..."
    link = "https://github.com/huggingface/peft/issues/..."
    signatures = ["peft/utils/integrations.py in dequantize_module_weight: *"]

    [cases."llama-tiny/lora-dora/train-eval-train"]
    graph_breaks = 21               # most graph breaks allowed (default 0)
    unexpected_recompiles = 2       # most unexpected recompiles allowed (default 0)
    expected_recompiles = 1         # most expected ones (the first train <-> eval switch; default 0 in an entry)
    break_signatures = ["peft/utils/integrations.py in dequantize_module_weight: Unsupported method call"]
    recompile_signatures = []       # (frame, guarded kind) of each unexpected recompile allowed
    ddp_splits = 1                  # most DDPOptimizer graph splits (bucket boundaries, not breaks; default 0)
    note = "..."                    # why, in a person's words, where no cause explains it

An entry may stand for several models or methods whose entries would be the same,
``[cases."{llama-tiny,qwen2-tiny}/lora/x"]`` or ``[cases."llama-tiny/{lora,dora}/x"]`` (both: every model with every
method): ``--update-budgets`` writes it so, and splits it again when one of them changes.

A case without an entry gets the default: 0 graph breaks, 0 unexpected recompiles, 0 DDP splits, and any
number of expected ones; an entry that says no more than that is not written. An entry that records counts
records the expected recompiles too (absent: 0), so a new expected one fails as well; an entry that records no
count (a known failure's reason only) allows any number of them. A non-zero ``graph_breaks``,
``unexpected_recompiles`` or ``ddp_splits`` needs a note, or a cause for each signature it allows.
A recorded entry allows only the break and unexpected-recompile signatures it lists (identity, not only
counts): a new one fails even when the count is within budget.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from pathlib import Path
from typing import Any

from compile_audit.case_ids import CaseId
from compile_audit.files import write_text_atomic
from compile_audit.rules.causes import Allowance, Cause, causes_of, propose

_FIELDS = (
    "graph_breaks",
    "unexpected_recompiles",
    "expected_recompiles",
    "note",
    "known_failure",
    "known_raises",
    "known_recompile_limit",
    "known_check",
    "break_signatures",
    "recompile_signatures",
    "ddp_splits",
    "recorded_with",
)
KNOWN_FAILURE_KINDS = ("known_raises", "known_recompile_limit", "known_check")
KNOWN_FAILURE_FIELDS = ("known_failure", *KNOWN_FAILURE_KINDS)
# How a tool marks a known failure's reason it proposed: the review check fails until a person rewrites it.
PROPOSED_REASON = "proposed: "
# The kinds that may name several problems (a string, or an array of strings), in the same entry as each other.
KNOWN_FAILURE_LISTS = ("known_recompile_limit", "known_check")
# An entry with any of these records what was counted, so its expected recompiles are bounded (absent: 0).
_COUNT_FIELDS = (
    "graph_breaks",
    "unexpected_recompiles",
    "expected_recompiles",
    "ddp_splits",
    "break_signatures",
    "recompile_signatures",
)
ONE_LINE = 200  # an array that fits in this many characters is written on one line
_CAUSE_FIELDS = ("note", "link", "signatures", "known_failures", "in_cases", "allows", "at_most")
_TOML_ERROR_LINE = re.compile(r"at line (\d+)")


def known_value_shown(value: str | tuple[str, ...]) -> str | tuple[str, ...]:
    """A known_* value as a person wrote it: a one-element list shows as its single string."""
    return value[0] if isinstance(value, tuple) and len(value) == 1 else value


class BudgetFileError(ValueError):
    """A malformed budgets file; the message names the file, the line and the entry."""


@dataclasses.dataclass(frozen=True)
class Budget:
    graph_breaks: int = 0
    # All recompiles, expected ones included (the file stores expected_recompiles); None: any number of expected.
    recompiles: int | None = None
    unexpected_recompiles: int = 0
    note: str = ""
    # A case PEFT cannot pass today (e.g. it recompiles forever): the reason, written by a person. It holds only
    # the problems its known_* fields name (compile_audit.rules.verdict); every other problem still fails the case,
    # and the case fails once the named problems are all gone, so that the entry gets removed.
    known_failure: str = ""
    known_raises: str = ""  # the type of the exception the case raises (its name, as type(exc).__name__)
    known_recompile_limit: tuple[str, ...] = ()  # the functions whose frames hit Dynamo's recompile limit
    known_check: tuple[str, ...] = ()  # the names of the failed checks: "steady state", or a scenario's check name
    break_signatures: tuple[str, ...] = ()  # root identities allowed (compile_audit.rules.roots)
    recompile_signatures: tuple[str, ...] = ()  # unexpected-recompile signatures allowed (Recompile.signature)
    ddp_splits: int = 0  # graph splits DDPOptimizer makes at DDP bucket boundaries (compile_audit.probe.ddp_splits)
    # The versions this entry was recorded with, when they differ from the file's [versions.<tier>] (a partial
    # --update-budgets on other versions): the ratchet is strict for the entry only on these.
    recorded_with: tuple[tuple[str, str], ...] = ()
    line: int | None = None  # where the entry starts in the file; None for the default
    recorded: bool = False  # False when the case has no entry and the default applies
    # The causes that explain the entry's signatures (Cause.describe), derived from the file; not written.
    explained_by: tuple[str, ...] = dataclasses.field(default=(), compare=False)
    # The causes that explain its known failure where the entry gives no reason of its own; derived, not written.
    known_because: tuple[str, ...] = dataclasses.field(default=(), compare=False)
    # What causes allow in this case beside the entry (Cause.allows); derived from the file, not written.
    allowed: tuple[Allowance, ...] = dataclasses.field(default=(), compare=False)
    # A case judged by the causes (a method the registry does not know yet, with no entry of its own): the causes
    # whose signatures it may have, any number of times (compile_audit.rules.verdict); derived, not written.
    judged_by: tuple[Cause, ...] = dataclasses.field(default=(), compare=False)

    @property
    def known(self) -> bool:
        """Whether the entry is a known failure (it names what it holds)."""
        return any(getattr(self, name) for name in KNOWN_FAILURE_KINDS)

    @property
    def known_reason(self) -> str:
        """The known failure's reason: the entry's own, else the causes that name it."""
        return self.known_failure or "; ".join(self.known_because)

    @property
    def signatures(self) -> tuple[str, ...]:
        return (*self.break_signatures, *self.recompile_signatures)

    @property
    def above_zero(self) -> bool:
        return bool(self.graph_breaks or self.unexpected_recompiles or self.ddp_splits)

    def says_only_the_default(self) -> bool:
        """No break, unexpected recompile or split allowed, and nothing a person wrote: the default says it all."""
        return not (self.above_zero or self.signatures or self.note or self.known)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Budget:
        data = dict(data)
        for name in ("break_signatures", "recompile_signatures", *KNOWN_FAILURE_LISTS):
            data[name] = tuple(data.get(name, ()))
        data["recorded_with"] = tuple(tuple(pair) for pair in data.get("recorded_with", ()))
        data["explained_by"] = tuple(data.get("explained_by", ()))
        data["known_because"] = tuple(data.get("known_because", ()))
        data["allowed"] = tuple(Allowance(**a) for a in data.get("allowed", ()))
        data["judged_by"] = tuple(
            Cause(**{**c, **{k: tuple(c.get(k, ())) for k in ("signatures", "known_failures", "in_cases", "allows")}})
            for c in data.get("judged_by", ())
        )
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class Observed:
    graph_breaks: int
    recompiles: int
    unexpected_recompiles: int
    break_signatures: tuple[str, ...] = ()
    recompile_signatures: tuple[str, ...] = ()
    ddp_splits: int = 0


@dataclasses.dataclass
class CountComparison:
    over: list[str]  # what exceeds the budget: a failure
    under: list[str]  # what beats the budget: "tighten the budget"


def known_failure_identities(case_id: str, budget: Budget) -> tuple[str, ...]:
    """What a cause's ``known_failures`` patterns match, one per problem the known failure holds:
    ``<case id>: raises <type>``, ``<case id>: recompile limit at <frame>``, ``<case id>: check <name>``."""
    if budget.known_raises:
        return (f"{case_id}: raises {budget.known_raises}",)
    return (
        *(f"{case_id}: recompile limit at {frame}" for frame in budget.known_recompile_limit),
        *(f"{case_id}: check {name}" for name in budget.known_check),
    )


def compare(observed: Observed, budget: Budget) -> CountComparison:
    over, under = [], []
    # The file bounds expected and unexpected recompiles each (expected_recompiles, unexpected_recompiles), and so
    # does the comparison: one more expected recompile fails even where one fewer unexpected one would offset it.
    expected_allowed = None if budget.recompiles is None else budget.recompiles - budget.unexpected_recompiles
    checks = [
        ("graph breaks", observed.graph_breaks, budget.graph_breaks),
        ("expected recompiles", observed.recompiles - observed.unexpected_recompiles, expected_allowed),
        ("unexpected recompiles", observed.unexpected_recompiles, budget.unexpected_recompiles),
        ("ddp splits", observed.ddp_splits, budget.ddp_splits),
    ]
    for label, seen, allowed in checks:
        if allowed is None:
            continue
        if seen > allowed:
            over.append(f"{label}: {seen} > budget {allowed}")
        elif seen < allowed and budget.recorded:
            under.append(f"{label}: {seen} < budget {allowed}")
    return CountComparison(over=over, under=under)


def _table_key(stripped: str, table: str) -> str | None:
    prefix = f"[{table}."
    return stripped[len(prefix) : -1].strip().strip("\"'") if stripped.startswith(prefix) else None


def _blocks(text: str, table: str) -> dict[str, str]:
    """Each ``[<table>.<key>]``'s text as written (its header up to the next table), for byte-exact rewrites."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("["):
            key = _table_key(stripped, table)
            current = None if key is None else blocks.setdefault(key, [])
        if current is not None:
            current.append(raw)
    return {key: "\n".join(lines).rstrip("\n ") for key, lines in blocks.items()}


def _lines(text: str, table: str) -> dict[str, int]:
    lines = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        key = _table_key(raw.strip(), table)
        if key is not None:
            lines[key] = number
    return lines


_BRACES_HELP = "write several models as {a,b}/method/scenario, several methods as model/{m,n}/scenario, or both"
_BRACED = re.compile(r"^\{(?P<names>[^{}]*)\}$")


def _segment_names(path: Path, key: str, line: int | None, segment: str) -> list[str]:
    """``{a,b}`` as its names, a plain segment as itself."""
    if "{" not in segment and "}" not in segment:
        return [segment]
    match = _BRACED.match(segment)
    if match is None:
        raise BudgetFileError(f"{path}:{line}: entry {key!r}: {_BRACES_HELP}")
    names = [name.strip() for name in match["names"].split(",")]
    if len(names) < 2 or not all(names) or len(set(names)) != len(names):
        raise BudgetFileError(
            f"{path}:{line}: entry {key!r}: the names in braces must be two or more distinct names, comma-separated"
        )
    return names


def _case_ids_of(path: Path, key: str, line: int | None) -> tuple[str, ...]:
    """The case ids an entry's key stands for: ``{llama-tiny,qwen2-tiny}/{lora,dora}/x`` is four (every model with
    every method)."""
    model, slash, rest = key.partition("/")
    method, slash2, scenario = rest.partition("/")
    if "{" in scenario or "}" in scenario or (("{" in key or "}" in key) and not (slash and slash2)):
        raise BudgetFileError(f"{path}:{line}: entry {key!r}: {_BRACES_HELP}")
    if not (slash and slash2):
        return (key,)
    models = _segment_names(path, key, line, model)
    methods = _segment_names(path, key, line, method)
    return tuple(f"{m}/{k}/{scenario}" for m in models for k in methods)


def _shared_by_models(case_id: str) -> str:
    """What an entry for several models groups on: the id without its model (a key that is no case id, itself)."""
    try:
        return CaseId.parse(case_id).without_model
    except ValueError:
        return case_id


def _key_of(case_ids: list[str]) -> str:
    """The key of one entry for these cases, which differ only in their model (the part before the first ``/``)."""
    if len(case_ids) == 1:
        return case_ids[0]
    identities = [CaseId.parse(case_id) for case_id in case_ids]
    return "{" + ",".join(identity.model for identity in identities) + "}/" + identities[0].without_model


def _check_count(path: Path, line: int | None, case_id: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BudgetFileError(f"{path}:{line}: entry {case_id!r}: {name} must be a non-negative integer, got {value!r}")
    return value


def _check_signatures(where: str, name: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise BudgetFileError(f"{where}: {name} must be a list of strings, got {value!r}")
    return tuple(value)


def _check_names(where: str, name: str, value: Any) -> tuple[str, ...]:
    """A known_* field that may name several problems: a string, or an array of distinct non-empty strings."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(item, str) for item in items):
        raise BudgetFileError(f"{where}: {name} must be a string or a list of strings, got {value!r}")
    names = tuple(item.strip() for item in items if item.strip())
    if len(set(names)) != len(names):
        raise BudgetFileError(f"{where}: {name} names {sorted(n for n in set(names) if names.count(n) > 1)} twice")
    return names


def _check_versions(where: str, value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise BudgetFileError(f"{where}: recorded_with must be a table of package = version, got {value!r}")
    return tuple(sorted(value.items()))


def _parse_cause(path: Path, name: str, raw: Any, line: int | None) -> Cause:
    where = f"{path}:{line}: cause {name!r}"
    if not isinstance(raw, dict):
        raise BudgetFileError(f"{where}: expected a table of {', '.join(_CAUSE_FIELDS)}, got {raw!r}")
    unknown = sorted(set(raw) - set(_CAUSE_FIELDS))
    if unknown:
        raise BudgetFileError(f"{where}: unknown key(s) {unknown}; allowed keys are {list(_CAUSE_FIELDS)}")
    for key in ("note", "link"):
        if not isinstance(raw.get(key, ""), str):
            raise BudgetFileError(f"{where}: {key} must be a string, got {raw[key]!r}")
    signatures = _check_signatures(where, "signatures", raw.get("signatures", []))
    known_failures = _check_signatures(where, "known_failures", raw.get("known_failures", []))
    if not (signatures or known_failures):
        raise BudgetFileError(f"{where}: signatures is empty; a cause names the signatures it explains")
    in_cases = _check_signatures(where, "in_cases", raw.get("in_cases", []))
    allows = _check_signatures(where, "allows", raw.get("allows", []))
    at_most = raw.get("at_most", 1)
    if bool(in_cases) != bool(allows):
        raise BudgetFileError(f"{where}: in_cases and allows go together (which cases, and what it allows there)")
    if "at_most" in raw and not allows:
        raise BudgetFileError(f"{where}: at_most without allows")
    if not isinstance(at_most, int) or isinstance(at_most, bool) or at_most < 1:
        raise BudgetFileError(f"{where}: at_most must be a whole number >= 1, got {at_most!r}")
    cause = Cause(
        name,
        raw.get("note", "").strip(),
        signatures,
        raw.get("link", "").strip(),
        line,
        known_failures,
        in_cases,
        allows,
        at_most,
    )
    foreign = [identity for identity in allows if not cause.explains(identity)]
    if foreign:
        raise BudgetFileError(f"{where}: allows {foreign[0]!r}, which none of its signatures names")
    return cause


def _explain(where: str, case_id: str, budget: Budget, causes: dict[str, Cause], *, strict: bool = True) -> Budget:
    """The entry with the causes of its signatures and of its known failure; an error when a budget above zero has
    neither a note (or a known failure) nor, for each signature it allows, a cause (a proposed one counts here:
    the review check asks for its note), or when a known failure has neither a reason nor a cause naming it."""
    found = {s: causes_of(s, causes) for s in budget.signatures}
    explained_by = tuple(dict.fromkeys(c.describe() for named in found.values() for c in named))
    known_because = ()
    if budget.known and not budget.known_failure:
        identities = known_failure_identities(case_id, budget)
        known_because = tuple(
            c.describe() for c in causes.values() if any(c.explains_known_failure(i) for i in identities)
        )
        unexplained = [i for i in identities if not any(c.explains_known_failure(i) for c in causes.values())]
        if strict and unexplained:
            raise BudgetFileError(
                f"{where}: a known failure without known_failure (the reason, in a person's words), and no cause"
                f" names {unexplained[0]!r} in its known_failures"
            )
    if strict and budget.above_zero and not (budget.note or budget.known):
        counted_without_signature = (
            (budget.graph_breaks and not budget.break_signatures)
            or (budget.unexpected_recompiles and not budget.recompile_signatures)
            or budget.ddp_splits
        )
        bare = [s for s, named in found.items() if not named]
        if counted_without_signature or bare:
            splits = f", ddp_splits={budget.ddp_splits}" if budget.ddp_splits else ""
            missing = f"; no cause names {bare}" if bare else ""
            raise BudgetFileError(
                f"{where}: graph_breaks={budget.graph_breaks}, unexpected_recompiles="
                f"{budget.unexpected_recompiles}{splits} but no note{missing}; a budget above zero must say why"
                " (a note, or a [causes.<name>] naming each signature)"
            )
    return dataclasses.replace(budget, explained_by=explained_by, known_because=known_because)


def _parse_entry(path: Path, case_id: str, raw: Any, line: int | None) -> Budget:
    where = f"{path}:{line}: entry {case_id!r}"
    if not isinstance(raw, dict):
        raise BudgetFileError(f"{where}: expected a table of {', '.join(_FIELDS)}, got {raw!r}")
    if "recompiles" in raw:
        raise BudgetFileError(
            f"{where}: recompiles is not a field; write expected_recompiles (recompiles - unexpected_recompiles:"
            " the expected ones only)"
        )
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise BudgetFileError(f"{where}: unknown key(s) {unknown}; allowed keys are {list(_FIELDS)}")
    texts = {name: raw.get(name, "") for name in ("note", "known_failure", "known_raises")}
    for name, value in texts.items():
        if not isinstance(value, str):
            raise BudgetFileError(f"{where}: {name} must be a string, got {value!r}")
    texts = {name: value.strip() for name, value in texts.items()}
    lists = {name: _check_names(where, name, raw.get(name, ())) for name in KNOWN_FAILURE_LISTS}
    named = [name for name in KNOWN_FAILURE_KINDS if texts.get(name) or lists.get(name)]
    if texts["known_failure"] and not named:
        raise BudgetFileError(
            f"{where}: known_failure needs at least one of {', '.join(KNOWN_FAILURE_KINDS)} (what it holds), got none"
        )
    if texts["known_raises"] and len(named) > 1:
        raise BudgetFileError(
            f"{where}: known_raises holds a crash, after which nothing else is judged; it cannot be combined with"
            f" {', '.join(n for n in named if n != 'known_raises')}"
        )
    unexpected = _check_count(path, line, case_id, "unexpected_recompiles", raw.get("unexpected_recompiles", 0))
    expected = _check_count(path, line, case_id, "expected_recompiles", raw.get("expected_recompiles", 0))
    budget = Budget(
        graph_breaks=_check_count(path, line, case_id, "graph_breaks", raw.get("graph_breaks", 0)),
        recompiles=unexpected + expected if any(name in raw for name in _COUNT_FIELDS) else None,
        unexpected_recompiles=unexpected,
        **texts,
        **lists,
        break_signatures=_check_signatures(where, "break_signatures", raw.get("break_signatures", [])),
        recompile_signatures=_check_signatures(where, "recompile_signatures", raw.get("recompile_signatures", [])),
        ddp_splits=_check_count(path, line, case_id, "ddp_splits", raw.get("ddp_splits", 0)),
        recorded_with=_check_versions(where, raw.get("recorded_with", {})),
        line=line,
        recorded=True,
    )
    return budget


HEADER = (
    "# Compile budgets: the most graph breaks and recompiles each case may have, and why.",
    "# Written by `pytest --update-budgets`; notes, causes and known failures are a person's words, and kept.",
    "# A non-zero graph_breaks, unexpected_recompiles or ddp_splits needs a note, or a cause for each signature.",
    "# A case with no entry may have 0 breaks, 0 unexpected recompiles, any number of expected ones.",
    "# expected_recompiles (first train <-> eval switch, grad mode) is 0 where absent in an entry that counts.",
    '# [cases."{llama-tiny,qwen2-tiny}/{lora,dora}/x"] is one entry for the four cases (each model with each method).',
)


def _cause_text(cause: Cause) -> list[str]:
    out = [f"[causes.{json.dumps(cause.name)}]", f"note = {json.dumps(cause.note, ensure_ascii=False)}"]
    if cause.link:
        out.append(f"link = {json.dumps(cause.link)}")
    out += _list_text("signatures", cause.signatures) + _list_text("known_failures", cause.known_failures)
    out += _list_text("in_cases", cause.in_cases) + _list_text("allows", cause.allows)
    return out + ([f"at_most = {cause.at_most}"] if cause.allows and cause.at_most != 1 else [])


def _entry_text(case_id: str, budget: Budget) -> list[str]:
    out = [f"[cases.{json.dumps(case_id)}]"]
    if budget.graph_breaks:
        out.append(f"graph_breaks = {budget.graph_breaks}")
    if budget.unexpected_recompiles:
        out.append(f"unexpected_recompiles = {budget.unexpected_recompiles}")
    expected = None if budget.recompiles is None else budget.recompiles - budget.unexpected_recompiles
    counted = budget.graph_breaks or budget.unexpected_recompiles or budget.ddp_splits or budget.signatures
    if expected or (expected == 0 and not counted):
        out.append(f"expected_recompiles = {expected}")
    if budget.ddp_splits:
        out.append(f"ddp_splits = {budget.ddp_splits}")
    if budget.note:
        out.append(f"note = {json.dumps(budget.note, ensure_ascii=False)}")
    for name in KNOWN_FAILURE_FIELDS:
        value = getattr(budget, name)
        shown = known_value_shown(value)
        if isinstance(shown, tuple) and shown:
            out += _list_text(name, shown)
        elif shown:
            out.append(f"{name} = {json.dumps(shown, ensure_ascii=False)}")
    if budget.recorded_with:
        pairs = ", ".join(f"{name} = {json.dumps(value)}" for name, value in budget.recorded_with)
        out.append(f"recorded_with = {{ {pairs} }}")
    for name in ("break_signatures", "recompile_signatures"):
        out += _list_text(name, getattr(budget, name))
    return out


def _list_text(name: str, values: tuple[str, ...]) -> list[str]:
    """One line where it fits in ONE_LINE characters (or holds one value), else one value per line."""
    quoted = [json.dumps(value, ensure_ascii=False) for value in values]
    if not quoted:
        return []
    one_line = f"{name} = [{', '.join(quoted)}]"
    if len(quoted) == 1 or len(one_line) <= ONE_LINE:
        return [one_line]
    return [f"{name} = [", *(f"    {value}," for value in quoted), "]"]


@dataclasses.dataclass
class BudgetFile:
    path: Path
    versions: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    causes: dict[str, Cause] = dataclasses.field(default_factory=dict)
    entries: dict[str, Budget] = dataclasses.field(default_factory=dict)
    # The text of each entry and cause as loaded: one this run did not change is written back byte for byte.
    written: dict[str, tuple[Budget, str]] = dataclasses.field(default_factory=dict, repr=False)
    written_causes: dict[str, tuple[Cause, str]] = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, path: str | Path, *, missing_ok: bool = False) -> BudgetFile:
        """Read and validate the file; a missing file is an error unless ``missing_ok`` (it is being created)."""
        path = Path(path)
        if not path.exists():
            if missing_ok:
                return cls(path=path)
            raise BudgetFileError(f"{path}: no such budgets file (pass --update-budgets to create it)")
        text = path.read_text(encoding="utf-8")
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            match = _TOML_ERROR_LINE.search(str(error))
            line = match[1] if match else "?"
            raise BudgetFileError(f"{path}:{line}: not valid TOML: {error}") from None
        unknown = sorted(set(data) - {"versions", "causes", "cases"})
        if unknown:
            raise BudgetFileError(
                f"{path}: unknown top-level table(s) {unknown}; expected 'versions', 'causes', 'cases'"
            )
        versions = data.get("versions", {})
        if not isinstance(versions, dict) or not all(isinstance(v, dict) for v in versions.values()):
            raise BudgetFileError(f"{path}: [versions.<tier>] must be tables of package = version")
        cause_lines = _lines(text, "causes")
        causes = {
            name: _parse_cause(path, name, raw, cause_lines.get(name)) for name, raw in data.get("causes", {}).items()
        }
        lines = _lines(text, "cases")
        blocks = _blocks(text, "cases")
        entries, written = {}, {}
        for key, raw in data.get("cases", {}).items():
            entry = _parse_entry(path, key, raw, lines.get(key))
            for case_id in _case_ids_of(path, key, entry.line):
                if case_id in entries:
                    raise BudgetFileError(
                        f"{path}:{entry.line}: entry {key!r}: case {case_id!r} has an entry already"
                        f" (line {entries[case_id].line})"
                    )
                entries[case_id] = _explain(f"{path}:{entry.line}: entry {key!r}", case_id, entry, causes)
                if key in blocks:
                    written[case_id] = (entries[case_id], blocks[key].partition("\n")[2])
        cause_blocks = _blocks(text, "causes")
        written_causes = {name: (c, cause_blocks[name]) for name, c in causes.items() if name in cause_blocks}
        return cls(path, versions, causes, entries, written, written_causes)

    def budget_for(self, case_id: str, *, judged_by_causes: bool = False) -> Budget:
        """The case's entry (or the default), with what causes allow in it beside the entry. ``judged_by_causes``:
        a case with no entry may have what the explained causes name (a method the registry does not know yet)."""
        allowed = tuple(a for cause in self.causes.values() for a in cause.allowances_for(case_id))
        budget = dataclasses.replace(self.entries.get(case_id, Budget()), allowed=allowed)
        if judged_by_causes and not budget.recorded:
            budget = dataclasses.replace(budget, judged_by=tuple(c for c in self.causes.values() if c.explained))
        return budget

    def where(self, case_id: str, relative_to: Path | None = None) -> str:
        """``file:line`` of the case's entry, for messages; or why the default budget applies."""
        budget = self.budget_for(case_id)
        if not budget.recorded:
            return "no entry in the budgets file: default budget 0 graph breaks, 0 unexpected recompiles"
        shown = self.path
        if relative_to is not None and self.path.is_relative_to(relative_to):
            shown = self.path.relative_to(relative_to)
        return f"{shown}:{budget.line}" if budget.line else str(shown)

    def versions_match(self, tier: str, installed: dict[str, str], case_id: str | None = None) -> bool:
        """Whether the installed versions are those the case's entry (or, without ``case_id``, the file) was
        recorded with: the entry's own ``recorded_with``, else the file's ``[versions.<tier>]``."""
        own = dict(self.entries[case_id].recorded_with) if case_id in self.entries else {}
        recorded = own or self.versions.get(tier)
        return bool(recorded) and all(installed.get(k) == v for k, v in recorded.items())

    def version_differences(self, tier: str, installed: dict[str, str], case_id: str | None = None) -> list[str]:
        """``transformers 5.25.0 (recorded 5.24.0)`` for each installed version that differs from the entry's (or
        the file's) recorded one."""
        own = dict(self.entries[case_id].recorded_with) if case_id in self.entries else {}
        recorded = own or self.versions.get(tier) or {}
        return [
            f"{name} {installed.get(name, 'missing')} (recorded {version})"
            for name, version in sorted(recorded.items())
            if installed.get(name) != version
        ]

    def apply(self, proposals: dict[str, Budget], tiers: dict[str, str], installed: dict[str, str]) -> None:
        """Record ``proposals`` (case id -> entry; ``tiers``: case id -> tier) made on the ``installed`` versions.
        A tier's ``[versions.<tier>]`` is set when it has none; otherwise an entry recorded on other versions keeps
        them as its own ``recorded_with``, and nothing else in the file changes (a partial update). A signature
        that no cause names and no note explains gets a proposed cause, for a person to explain."""
        for case_id, budget in proposals.items():
            tier = tiers[case_id]
            if not self.versions.get(tier):
                self.versions[tier] = dict(installed)
            own = () if self.versions[tier] == installed else tuple(sorted(installed.items()))
            self.entries[case_id] = dataclasses.replace(budget, recorded_with=own)
        bare = [s for case_id in proposals for s in self._needs_a_cause(self.entries[case_id])]
        self.causes.update(propose(bare, self.causes))
        for case_id in proposals:
            self.entries[case_id] = _explain(str(self.path), case_id, self.entries[case_id], self.causes, strict=False)

    @staticmethod
    def _needs_a_cause(budget: Budget) -> tuple[str, ...]:
        return () if budget.note or budget.known or not budget.above_zero else budget.signatures

    def unexplained(self) -> dict[str, list[str]]:
        """Case id -> the signatures its budget allows that neither a note nor an explained cause accounts for."""
        out = {}
        for case_id, budget in self.entries.items():
            bare = [s for s in self._needs_a_cause(budget) if not any(c.explained for c in causes_of(s, self.causes))]
            if bare:
                out[case_id] = bare
        return out

    def proposed_reasons(self) -> list[str]:
        """Known failures whose reason is still the one a tool proposed (PROPOSED_REASON), not a person's."""
        return sorted(i for i, b in self.entries.items() if b.known_failure.startswith(PROPOSED_REASON))

    def stale(self, known_case_ids: set[str]) -> list[str]:
        return sorted(set(self.entries) - known_case_ids)

    def unused_causes(self) -> list[str]:
        """Causes that name no signature any entry allows and no known failure of an entry (their upstream cause
        is gone, or never applied)."""
        allowed = {s for budget in self.entries.values() for s in budget.signatures}
        known = {k for i, b in self.entries.items() if b.known for k in known_failure_identities(i, b)}
        return sorted(
            name
            for name, cause in self.causes.items()
            if not cause.allows  # a shared allowance is used wherever its cases run; the file cannot tell
            and not any(cause.explains(s) for s in allowed)
            and not any(cause.explains_known_failure(k) for k in known)
        )

    def unmet_allowances(self, audited: dict[str, set[tuple[str, str]]]) -> list[str]:
        """The ratchet of shared allowances: each identity a cause ``allows`` that none of the audited cases it
        covers met. ``audited``: case id -> the (cause, identity) pairs its allowances held (the report's
        ``allowed_by_causes``). An allowance none of whose cases ran is not judged."""
        unmet = []
        for cause in self.causes.values():
            covered = [case_id for case_id in audited if cause.allowances_for(case_id)]
            for identity in cause.allows:
                if covered and not any((cause.name, identity) in audited[case_id] for case_id in covered):
                    unmet.append(
                        f"cause {cause.name!r} allows {identity!r} in {len(covered)} case(s) that ran, and none of"
                        " them met it: remove it from the cause's allows"
                    )
        return unmet

    def dumps(self) -> str:
        out = [*HEADER, ""]
        for tier in sorted(self.versions):
            out.append(f"[versions.{tier}]")
            out.extend(f"{name} = {json.dumps(value)}" for name, value in sorted(self.versions[tier].items()))
            out.append("")
        for name in sorted(self.causes):
            cause = self.causes[name]
            loaded = self.written_causes.get(name)
            same = loaded is not None and dataclasses.replace(loaded[0], line=None) == dataclasses.replace(
                cause, line=None
            )
            out += [loaded[1], ""] if same else [*_cause_text(cause), ""]
        # Cases whose entries read the same but for the model are written as one entry.
        groups: dict[tuple[str, str], list[str]] = {}
        for case_id in sorted(self.entries):
            budget = self.entries[case_id]
            loaded = self.written.get(case_id)
            if loaded is not None and loaded[0] == budget:
                body = loaded[1]
            elif not budget.says_only_the_default():
                body = "\n".join(_entry_text(case_id, budget)[1:])
            else:
                continue
            groups.setdefault((_shared_by_models(case_id), body), []).append(case_id)
        # Then entries that differ only in the method (the same models, scenario and body) are written as one.
        by_method: dict[tuple[str, str, str], list[str]] = {}
        entries = []
        for (_, body), case_ids in groups.items():
            key = _key_of(case_ids)
            models, _, rest = key.partition("/")
            method, _, scenario = rest.partition("/")
            if scenario:
                by_method.setdefault((models, scenario, body), []).append(method)
            else:  # a key that is no case id: written as it is
                entries.append((case_ids[0], key, body))
        for (models, scenario, body), methods in by_method.items():
            method = methods[0] if len(methods) == 1 else "{" + ",".join(sorted(methods)) + "}"
            key = f"{models}/{method}/{scenario}"
            entries.append((_case_ids_of(self.path, key, None)[0], key, body))
        for _, key, body in sorted(entries):
            out += [f"[cases.{json.dumps(key)}]", body]
        return "\n".join(out) + "\n"

    def write(self) -> None:
        write_text_atomic(self.path, self.dumps())

    def proposal(self, case_id: str, observed: Observed) -> Budget:
        """The entry that records what was observed, keeping a note and a known failure a person wrote."""
        previous = self.entries.get(case_id)
        return Budget(
            graph_breaks=observed.graph_breaks,
            recompiles=observed.recompiles,
            unexpected_recompiles=observed.unexpected_recompiles,
            note=previous.note if previous else "",
            **{name: getattr(previous, name) if previous else "" for name in KNOWN_FAILURE_FIELDS},
            break_signatures=tuple(sorted(observed.break_signatures)),
            recompile_signatures=tuple(sorted(observed.recompile_signatures)),
            ddp_splits=observed.ddp_splits,
            recorded=True,
        )

    def record(self, case_id: str, observed: Observed) -> None:
        self.entries[case_id] = _explain(
            str(self.path), case_id, self.proposal(case_id, observed), self.causes, strict=False
        )

"""The build fingerprints of a run (``pytest --build-fingerprints PATH``, ``compile_audit.probe.builds``): read,
written and compared, without torch.

    {"format": 2, "cases": {"llama-tiny/lora/save-load": {"digest": ..., "modules": [...], "package_values": {...},
                                                          "package_entries": "3f2a...", "state": {...},
                                                          "seconds": 0.4},
                            "opt-tiny/boft/depth": {"missing": "raised ValueError: ..."}},
     "entries": {"3f2a...": {"peft.mapping.PEFT_TYPE_TO_CONFIG_MAPPING": {key: digest, ...}, ...}}}

``wall_seconds``: the whole run's, pytest's start-up included; ``seconds``: each case's body up to its first
compile (what comparing builds costs the gate, per side). A case with ``missing`` has no fingerprint (it raised, or
ended without compiling): nothing can be told from it. ``entries``: the packages' dict tables entry by entry, kept
once per distinct set (most cases of a run share one); a format 1 file has none. ``state``: what the case did before
its first compile besides building (failed checks, tensors kept, files written), by digest; an older file has none.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

FORMAT = 2
FORMATS = (1, FORMAT)


def entries_key(entries: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()[:16]


def to_json(
    cases: Mapping[str, Mapping[str, Any]],
    wall_seconds: float | None = None,
    entries: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    data = {"format": FORMAT, "cases": dict(sorted(cases.items())), "wall_seconds": wall_seconds}
    data["entries"] = dict(entries or {})
    return json.dumps(data, sort_keys=True) + "\n"


def read(path: Path) -> dict[str, dict[str, Any]]:
    """The fingerprints by case id; ValueError naming the file on bad input."""
    return read_run(path)[0]


def read_run(path: Path) -> tuple[dict[str, dict[str, Any]], float | None]:
    """The fingerprints by case id, and the run's wall seconds (start-up included) where it says them."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: unreadable build fingerprints: {error}") from None
    if not isinstance(data, dict) or data.get("format") not in FORMATS or not isinstance(data.get("cases"), dict):
        raise ValueError(f"{path}: not a build fingerprints file (format {FORMAT}, 'cases' by case id)")
    entries = data.get("entries") or {}
    cases = {}
    for case, found in data["cases"].items():
        key = found.get("package_entries") if isinstance(found, dict) else None
        if isinstance(key, str):
            if key not in entries:
                raise ValueError(f"{path}: case {case!r} names entries {key!r}, which the file does not hold")
            found = {**found, "package_entries": entries[key]}
        cases[case] = found
    return cases, data.get("wall_seconds")


def same_build(base: Mapping[str, Any] | None, head: Mapping[str, Any] | None) -> bool:
    """Both sides fingerprinted their build, and the fingerprints are equal."""
    return bool(base and head and "digest" in base and base.get("digest") == head.get("digest"))


def differences(base: dict[str, Any], head: dict[str, Any], limit: int = 3) -> list[str]:
    """What differs between two fingerprints, as short lines: the modules and values whose digests differ."""
    found = []
    if len(base["modules"]) != len(head["modules"]):
        found.append(f"{len(base['modules'])} root module(s) against {len(head['modules'])}")
    for old_root, new_root in zip(base["modules"], head["modules"], strict=False):
        old, new = old_root["modules"], new_root["modules"]
        changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        found += [f"{new_root['type']} {k!r} differs" for k in changed[:limit]]
    for field in ("package_values", "state"):
        old, new = base.get(field, {}), head.get(field, {})
        found += [f"{k} differs" for k in sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))]
    return found[:limit] or ([] if base["digest"] == head["digest"] else ["the digests differ"])


def only_gained(
    base: Mapping[str, Any], head: Mapping[str, Any], gaining: Iterable[str], rebound: Iterable[str] = ()
) -> bool:
    """The builds differ only in what the change adds: keys of the tables ``gaining`` names (by their own name,
    ``PEFT_TYPE_TO_CONFIG_MAPPING``), each of which kept every entry of base's, module-level names base did not
    bind (a new method's target-module table), and the values of the names the change's own statements bind
    (``rebound``, dotted: an import now taken from another module). The selection selects the code going over those
    tables and the readers of those names on its own."""
    gaining, rebound = set(gaining), set(rebound)
    old, new = base.get("package_values", {}), head.get("package_values", {})
    differing = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
    if not differing or base.get("modules") != head.get("modules") or base.get("state") != head.get("state"):
        return False
    old_entries, new_entries = base.get("package_entries") or {}, head.get("package_entries") or {}
    for name in differing:
        if name not in old or name in rebound:
            continue  # bound by the change
        if name.rpartition(".")[2] not in gaining or name not in old_entries or name not in new_entries:
            return False
        kept, grown = old_entries[name], new_entries[name]
        if any(grown.get(key) != digest for key, digest in kept.items()) or len(grown) <= len(kept):
            return False
    return True


def compare(
    cases: Iterable[str],
    base: Mapping[str, Mapping[str, Any]],
    head: Mapping[str, Mapping[str, Any]],
    gaining: Iterable[str] = (),
    rebound: Iterable[str] = (),
) -> tuple[list[str], dict[str, str]]:
    """The cases that built the same on both sides, and for every other one why it must run: what differs, or
    which side has no fingerprint. ``gaining``: the tables the change adds keys to (``Selection.tables_gaining``);
    ``rebound``: the module-level names its statements bind (``Selection.names_rebound``); a build that differs
    only by their new keys, or those names' values, is the same build."""
    same, run = [], {}
    gaining, rebound = tuple(gaining), tuple(rebound)
    for case in cases:
        old, new = base.get(case), head.get(case)
        if same_build(old, new) or (
            old and new and "digest" in old and "digest" in new and only_gained(old, new, gaining, rebound)
        ):
            same.append(case)
        elif not old or "digest" not in old or not new or "digest" not in new:
            missing = [
                f"{side}: {(data or {}).get('missing', 'not fingerprinted')}"
                for side, data in (("base", old), ("head", new))
                if not data or "digest" not in data
            ]
            run[case] = "no fingerprint (" + "; ".join(missing) + ")"
        else:
            run[case] = "built differently: " + "; ".join(differences(old, new))
    return same, run

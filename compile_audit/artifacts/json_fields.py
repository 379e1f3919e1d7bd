"""A report's JSON fields read as the types they must have, with errors that say where: the file, the case, the field
(the readers of compile_audit.artifacts.records)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any


class ReportError(ValueError):
    """A report that cannot be used; the message names the file, and the case and the field where one is wrong."""


@dataclasses.dataclass(frozen=True)
class Where:
    """A place in a report, for error messages: the file, the case ("case 'a/b/c'", "case #3") and the field."""

    path: str
    case: str = ""
    field: str = ""

    def at(self, key: str | int) -> Where:
        if isinstance(key, int):
            return dataclasses.replace(self, field=f"{self.field}[{key}]")
        return dataclasses.replace(self, field=f"{self.field}.{key}" if self.field else key)

    def error(self, problem: str) -> ReportError:
        return ReportError(": ".join(part for part in (self.path, self.case, self.field, problem) if part))


_EXPECTED = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "a list",
    dict: "an object",
}
_SHOWN_WIDTH = 60


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return {str: "a string", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _mismatch(where: Where, kind: type, value: Any, optional: bool = False) -> ReportError:
    shown = json.dumps(value, default=repr)
    shown = shown if len(shown) <= _SHOWN_WIDTH else shown[: _SHOWN_WIDTH - 1] + "…"
    return where.error(f"expected {_EXPECTED[kind]}{' or null' if optional else ''}, got {_json_kind(value)} {shown}")


def _is(value: Any, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


def json_object(data: Any, where: Where) -> Mapping[str, Any]:
    if not isinstance(data, dict):
        raise _mismatch(where, dict, data)
    return data


def field_value(
    data: Mapping[str, Any], key: str, where: Where, kind: type, default: Any, optional: bool = False
) -> Any:
    """``data[key]`` checked to be of ``kind`` (or null, when optional); ``default`` when the field is absent."""
    if key not in data:
        return default
    value = data[key]
    if (optional and value is None) or _is(value, kind):
        return value
    raise _mismatch(where.at(key), kind, value, optional)


def required_text(data: Mapping[str, Any], key: str, where: Where) -> str:
    if key not in data:
        raise where.at(key).error("missing")
    return field_value(data, key, where, str, "")


def list_items(data: Mapping[str, Any], key: str, where: Where, kind: type) -> list[tuple[Any, Where]]:
    """The items of the list ``data[key]`` (none when absent), each checked to be of ``kind``, with its place."""
    placed = [(item, where.at(key).at(index)) for index, item in enumerate(field_value(data, key, where, list, []))]
    for item, place in placed:
        if not _is(item, kind):
            raise _mismatch(place, kind, item)
    return placed


def texts(data: Mapping[str, Any], key: str, where: Where) -> tuple[str, ...]:
    return tuple(item for item, _ in list_items(data, key, where, str))


def read_only_mapping(data: Mapping[str, Any], key: str, where: Where) -> Mapping[str, Any]:
    return MappingProxyType(dict(field_value(data, key, where, dict, {})))


def read_only_mappings(data: Mapping[str, Any], key: str, where: Where) -> tuple[Mapping[str, Any], ...]:
    return tuple(MappingProxyType(dict(item)) for item, _ in list_items(data, key, where, dict))


def records(data: Mapping[str, Any], key: str, where: Where, record: Any) -> tuple[Any, ...]:
    """The list ``data[key]``, each item read by ``record.from_dict``."""
    return tuple(record.from_dict(item, place) for item, place in list_items(data, key, where, dict))


def section(data: Mapping[str, Any], key: str, where: Where, record: Any) -> Any:
    """The object ``data[key]`` (empty when absent), read by ``record.from_dict``."""
    return record.from_dict(field_value(data, key, where, dict, {}), where.at(key))

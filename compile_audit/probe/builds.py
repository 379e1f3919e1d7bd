"""What a case built before its first compile, as a fingerprint: two builds with equal fingerprints compile the same.

A change to code that a case runs only while building its model (``compile_audit.probe.footprint``: the functions
that ran only before the first compile) can change what the case compiles only through what it built. The
fingerprint holds what Dynamo can see of that, and what the case's later code reads:

- every module the running frames hold at the first compile (the test's locals: the model, its eager twin, a
  reference) that no other of them holds, graphs of earlier compiles left out (the model, its eager twin, a reference),
  each as its tree: qualified names and types, every parameter and buffer (shape, dtype, ``requires_grad``, a digest
  of its values), the hooks registered on it (their functions), and every other attribute of its instance (plain
  values as text, objects by type and their attributes, functions by name);
- the module-level values of the packages under test (a table a build registered a key in), and the process-wide
  torch settings every case must restore (``compile_audit.probe.global_state``: a build that sets one), and torch's
  random state (a build that draws one number more changes what the steps after it draw);
- what else the case did before its first compile that its verdict reads later (``state``): the checks it has made
  (a failed one fails the case whatever it compiles), the tensors the test's frames keep (an eager reference output
  the compiled run is compared with) and the files under the temporary folder those frames name (an adapter saved to
  be loaded later). A model the case made, checked and dropped before compiling is no module of the fingerprint; what
  its check found is.

Addresses and ids are left out: two processes building the same thing print the same fingerprint. A case whose
first compile is not of a module (a Trainer that compiles by itself) still gets one: what is alive is fingerprinted
all the same.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import re
import sys
import tempfile
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from compile_audit.probe import global_state

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+|0x[0-9a-fA-F]{6,}")
_MAX_DEPTH = 4  # nested containers and objects past this depth are described by their type
_PLAIN = (str, int, float, bool, complex, bytes, type(None))
_EXACTLY_PLAIN = frozenset({int, float, bool, type(None)})  # described as they are (a subclass may be an Enum)
_json_string = json.encoder.encode_basestring_ascii  # json.dumps of a str, without its per-call set-up
_TEMPORARY = tempfile.gettempdir().rstrip("/") + "/"
_TEMPORARY_PATH = re.compile(re.escape(_TEMPORARY) + r"\S*")
# What every nn.Module keeps for itself (parameters, buffers, children, hooks: each read on its own above), but the
# training flag; private attributes of a subclass (an adapter's _active_adapter) are its state, and count.
_MODULE_BOOKKEEPING = frozenset(vars(torch.nn.Module())) - {"training"}


class BuildFingerprinted(Exception):
    """Raised at a case's first compile in a fingerprint run: the build is recorded, the case goes no further."""

    def __init__(self, fingerprint: dict[str, Any]) -> None:
        super().__init__("build fingerprinted at the first compile")
        self.fingerprint = fingerprint


_recording: list[Sequence[str]] = []  # the packages under test, while a fingerprint run is on


def recording(packages: Sequence[str]) -> _Recording:
    """Within it, a case's first compile raises :class:`BuildFingerprinted` with what was built."""
    return _Recording(tuple(packages))


class _Recording:
    def __init__(self, packages: tuple[str, ...]) -> None:
        self.packages = packages

    def __enter__(self) -> None:
        _recording.append(self.packages)

    def __exit__(self, *exc: object) -> None:
        _recording.remove(self.packages)


def first_compile(checks: Sequence[tuple[str, str]] = ()) -> None:
    """Called by the audit when a case asks for its first compile, with the checks that failed so far (check name,
    message); in a fingerprint run, stops the case there."""
    if _recording:
        frame = sys._getframe(1)
        state = precompile_state(frame, checks)
        raise BuildFingerprinted(fingerprint(_recording[-1], held_by_frames(frame), state=state))


def held_by_frames(frame: types.FrameType | None) -> list[torch.nn.Module]:
    """The modules the running frames hold, directly or in a container (the test's model, its eager twin, what a
    fixture returned): what the case built, without scanning every object of the process."""
    found: dict[int, torch.nn.Module] = {}
    while frame is not None:
        for value in frame.f_locals.values():
            values = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
            for item in (value, *values):
                if issubclass(type(item), torch.nn.Module):  # type(): a lazy module answers __class__ by __getattr__
                    found.setdefault(id(item), item)
        frame = frame.f_back
    return list(found.values())


def fingerprint(
    packages: Sequence[str], modules: Sequence[torch.nn.Module], state: dict[str, str] | None = None
) -> dict[str, Any]:
    """The root modules among ``modules``, the packages' module values and the case's pre-compile ``state``
    (:func:`precompile_state`), with one digest of it all. Roots are sorted: the order objects are found in is no
    part of a build. Each of the packages' dict tables is also kept entry by entry (``package_entries``): a table
    that only gained keys can be told from one whose entries changed."""
    modules = [m for m in modules if not issubclass(type(m), torch.fx.GraphModule)]
    held = {id(child) for module in modules for child in module.modules() if child is not module}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated attributes read on the way are no part of the build
        trees = sorted(
            ({"type": _type_name(m), "modules": _digests(module_tree(m))} for m in modules if id(m) not in held),
            key=lambda tree: (tree["type"], sorted(tree["modules"]), _digest(tree)),
        )
        settings = {
            f"torch setting {name}": describe(value)
            for name, value in global_state.snapshot().items()
            if not (isinstance(value, str) and os.path.isabs(value))  # where torch is installed: each venv its own
        }
        rng = {"torch random state": tensor_summary(torch.get_rng_state())}  # what the steps after the build draw
        tables = package_values(packages)
        values = _digests({**tables, **settings, **rng})
    by_table: dict[int, dict[str, str]] = {}  # a table several modules re-export is one described object
    entries = {
        name: _once(by_table, value, lambda table: _digests(table["items"]))
        for name, value in tables.items()
        if isinstance(value, dict) and isinstance(value.get("items"), list) and value["type"].endswith("dict")
    }
    state = dict(sorted((state or {}).items()))
    return {
        "digest": _digest([trees, values, state] if state else [trees, values]),
        "modules": trees,
        "package_values": values,
        "package_entries": entries,
        "state": state,
    }


# Frames of these files are the harness's or a library's, not the case's: their locals are no state of the case.
_NOT_THE_CASE = ("/site-packages/", "/dist-packages/", "/compile_audit/", "/compile_gate/", "/_pytest/", "/pluggy/")
_MAX_FILES = 200  # per folder a frame names: a case saves an adapter or a base, a few files


def _case_frames(frame: types.FrameType | None) -> Iterator[types.FrameType]:
    """The frames of the case's own code (the test, its fixtures' and the zoo's helpers), innermost first."""
    while frame is not None:
        path = frame.f_code.co_filename
        if not any(part in path for part in _NOT_THE_CASE) and not path.startswith(sys.base_prefix):
            yield frame
        frame = frame.f_back


def _held_values(frame: types.FrameType | None) -> Iterator[tuple[str, Any]]:
    """(where, value) for each local of the case's frames and each item of a local dict, list or tuple."""
    for held in _case_frames(frame):
        for name, value in held.f_locals.items():
            where = f"{held.f_code.co_name}.{name}"
            yield where, value
            if isinstance(value, dict):
                yield from ((f"{where}[{key!r}]", item) for key, item in value.items())
            elif isinstance(value, (list, tuple)):
                yield from ((f"{where}[{index}]", item) for index, item in enumerate(value))


def _files_under(path: str) -> Iterator[tuple[str, str]]:
    """(path relative to ``path``, digest of its bytes) for a file or each file of a folder, sorted."""
    if os.path.isfile(path):
        with open(path, "rb") as file:
            yield "", hashlib.sha256(file.read()).hexdigest()[:16]
        return
    found = sorted(os.path.join(root, name) for root, _, names in os.walk(path) for name in names)
    for name in found[:_MAX_FILES]:
        with open(name, "rb") as file:
            yield os.path.relpath(name, path), hashlib.sha256(file.read()).hexdigest()[:16]


def precompile_state(frame: types.FrameType | None, checks: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    """What a case did before its first compile that its verdict reads later, besides the modules its frames hold,
    each by a digest: the checks that failed (a temporary path and an address are no part of a message), the tensors
    the case's frames keep (parameters aside: the modules hold those), and the files under the temporary folder a
    frame names (by their place in it: the folder's own name is random)."""
    state = {
        f"check {name} #{index}": _digest(_ADDRESS.sub("", _TEMPORARY_PATH.sub("<tmp>", text)))
        for index, (name, text) in enumerate(checks)
    }
    for where, value in _held_values(frame):
        if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
            state[f"tensor {where}"] = _digest(tensor_summary(value))
        elif isinstance(value, (str, os.PathLike)) and str(value).startswith(_TEMPORARY) and os.path.exists(value):
            for relative, digest in _files_under(str(value)):
                state[f"file {where}/{relative}".rstrip("/")] = digest
    return state


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _digests(described: dict[str, Any] | list[tuple[str, Any]]) -> dict[str, str]:
    """Each entry by a short digest: enough to name what differs between two builds, small enough to keep. One
    described object under several names is digested once."""
    pairs = described.items() if isinstance(described, dict) else described
    found: dict[int, str] = {}
    return {key: _once(found, value, _digest) for key, value in pairs}


def _once(found: dict[int, Any], value: Any, make: Callable[[Any], Any]) -> Any:
    """``make(value)``, made once per object for as long as ``found`` (and the object) lives."""
    if id(value) not in found:
        found[id(value)] = make(value)
    return found[id(value)]


def module_tree(root: torch.nn.Module) -> dict[str, Any]:
    tree = {}
    for name, module in root.named_modules(remove_duplicate=False):
        tree[name or "."] = {
            "type": _type_name(module),
            "parameters": {n: tensor_summary(p) for n, p in module._parameters.items()},
            "buffers": {n: tensor_summary(b) for n, b in module._buffers.items()},
            "hooks": _hooks(module),
            "attributes": _attributes(module),
        }
    return tree


def _attributes(module: torch.nn.Module) -> dict[str, Any]:
    if isinstance(module, torch._dynamo.eval_frame.OptimizedModule):
        return {"training": module.training}  # a compile's wrapper: its state is Dynamo's, the module is its child
    return {key: describe(value) for key, value in sorted(vars(module).items()) if key not in _MODULE_BOOKKEEPING}


def tensor_summary(tensor: torch.Tensor | None) -> Any:
    if tensor is None:
        return None
    summary = {
        "type": _type_name(tensor),
        "shape": list(tensor.shape),
        "dtype": str(tensor.dtype),
        "requires_grad": tensor.requires_grad,
    }
    flatten = getattr(type(tensor), "__tensor_flatten__", None)
    if flatten is not None:  # a tensor subclass (torchao's quantized weights): the tensors it is made of
        names, context = tensor.__tensor_flatten__()
        summary["inner"] = {name: tensor_summary(getattr(tensor, name)) for name in names}
        summary["context"] = _ADDRESS.sub("", repr(context))[:200]
    elif tensor.device.type != "meta" and not tensor.is_sparse:
        data = tensor.detach().cpu().reshape(-1).contiguous()
        summary["values"] = hashlib.sha256(data.view(torch.uint8).numpy().tobytes()).hexdigest()[:16]
    return summary


def _hooks(module: torch.nn.Module) -> dict[str, list[str]]:
    found = {}
    for kind in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
        hooks = getattr(module, kind, {})
        if hooks:
            found[kind.strip("_")] = [describe(hook) for hook in hooks.values()]
    state = getattr(module, "_state_dict_hooks", {})
    if state:
        found["state_dict_hooks"] = [describe(hook) for hook in state.values()]
    return found


def describe(value: Any, depth: int = 0) -> Any:
    """A value as JSON data that two processes agree on."""
    kind = type(value)
    if kind is str:
        return "<a temporary path>" if value.startswith(_TEMPORARY) else value
    if kind in _EXACTLY_PLAIN:
        return value
    if isinstance(value, enum.Enum):
        return f"{_type_name(value)}.{value.name}"
    if isinstance(value, str) and value.startswith(_TEMPORARY):
        return "<a temporary path>"  # a folder the case made to save and load through: its name is random
    if isinstance(value, _PLAIN):
        return value if not isinstance(value, (bytes, complex)) else repr(value)
    if isinstance(value, torch.Tensor):
        return tensor_summary(value)
    if isinstance(value, (torch.dtype, torch.device)):
        return str(value)
    if isinstance(value, torch.nn.Module):
        return f"module {_type_name(value)}"  # the tree holds it where it is a child; elsewhere, its type
    if isinstance(value, (types.FunctionType, types.MethodType, types.BuiltinFunctionType, type)):
        return f"callable {_callable_name(value)}"
    if depth >= _MAX_DEPTH:
        return f"<{_type_name(value)}>"
    if isinstance(value, dict):
        return {"type": _type_name(value), "items": sorted(_pairs(value, depth))}
    if isinstance(value, (list, tuple)):
        return {"type": _type_name(value), "items": [describe(v, depth + 1) for v in value]}
    if isinstance(value, (set, frozenset)):
        return {"type": _type_name(value), "items": sorted(json.dumps(describe(v, depth + 1)) for v in value)}
    if callable(value) and hasattr(value, "func"):  # functools.partial
        return f"callable partial {_callable_name(value.func)}"
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        attributes = _without_variant_switches_off(value, attributes)
        return {"type": _type_name(value), "attributes": dict(sorted(_pairs(attributes, depth)))}
    return {"type": _type_name(value), "text": _ADDRESS.sub("", repr(value))[:200]}


# How PEFT's configs declare a field that switches a variant on (LoraConfig's use_dora, kasa_config, ...).
VARIANT_SWITCH = "is_lora_variant"


def _without_variant_switches_off(value: Any, attributes: dict[str, Any]) -> dict[str, Any]:
    """A config's attributes less its variant switches that are off: PEFT builds a variant only from the switches that
    are on, so a switch that is off (one a change adds, say) is no part of the build; one switched on is."""
    fields = getattr(type(value), "__dataclass_fields__", None)
    if not isinstance(fields, dict):
        return attributes
    off = {
        name
        for name, declared in fields.items()
        if getattr(declared, "metadata", {}).get(VARIANT_SWITCH) and attributes.get(name) in (None, False)
    }
    return {key: item for key, item in attributes.items() if key not in off}


def _pairs(mapping: dict, depth: int) -> Iterator[tuple[str, Any]]:
    for key, value in mapping.items():
        if isinstance(key, str) and "hash" in key:  # str hashes differ between processes (transformers keeps some)
            continue
        described = describe(key, depth + 1)
        text = _json_string(described) if type(described) is str else json.dumps(described, sort_keys=True)
        yield text, describe(value, depth + 1)


def package_values(packages: Iterable[str]) -> dict[str, Any]:
    """Plain module-level values of the loaded modules of these packages: what a build may have registered."""
    values = {}
    described: dict[int, Any] = {}  # an object several modules re-export (PEFT's mappings) is described once
    wanted = tuple(packages)
    for name, module in sorted(sys.modules.items()):
        if module is None or name.split(".", 1)[0] not in wanted:
            continue
        for key, value in sorted(vars(module).items()):
            if key.startswith("__") or isinstance(value, (types.ModuleType, types.FunctionType, type)):
                continue
            if isinstance(value, (*_PLAIN, dict, list, set, tuple, enum.Enum)):
                values[f"{name}.{key}"] = _once(described, value, describe)
    return values


def _type_name(value: Any) -> str:
    kind = value if isinstance(value, type) else type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _callable_name(value: Any) -> str:
    function = getattr(value, "__func__", value)
    name = getattr(function, "__qualname__", None) or _ADDRESS.sub("", repr(function))  # a partial: its repr
    return f"{getattr(function, '__module__', '?')}.{name}"

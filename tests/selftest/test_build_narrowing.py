"""Build-time narrowing: what a case ran only before its first compile is told apart (the footprint), a change to it
marks the case as reached only while building (the selection), and two builds compare by fingerprint, so that an
equal build deselects the case and a different one keeps it (the gate)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import torch

from compile_audit.probe import builds, footprint
from compile_audit.probe.footprint import FootprintRecorder
from compile_audit.rules.budgets import Budget
from compile_audit.rules.case import CaseAudit
from compile_audit.selection import builds_file, footprints_file
from compile_audit.selection.change_selection import select_between
from tests.selftest.test_change_selection import BASE, TOY_FOOTPRINTS, _packages, _toy

pytestmark = pytest.mark.selftest

HERE = "tests/selftest/test_build_narrowing.py"


def build_twice():
    return 2


def at_build_and_step():
    return 1


def step():
    return at_build_and_step() + 1


def build():
    hooks = [lambda: 3]  # a lambda made while building, called at step time: its function is not building only
    return build_twice() + build_twice() + at_build_and_step(), hooks


def test_the_footprint_tells_functions_run_only_before_the_first_compile():
    with FootprintRecorder(["tests"]) as recorder:
        _, hooks = build()
        footprint.mark_built()
        step()
        hooks[0]()
    built = set(recorder.built_only()[HERE])
    assert {"build", "build_twice"} <= built
    assert not built & {"at_build_and_step", "step", "build.<locals>.<lambda>"}
    # The file's keys: the lambda is its enclosing function's, and it ran after the first compile.
    keys = footprints_file.only_building(recorder.footprint(), recorder.built_only())
    assert f"{HERE}::build_twice" in keys and f"{HERE}::build" not in keys


def test_a_case_that_never_compiles_builds_nothing_only():
    with FootprintRecorder(["tests"]) as recorder:
        build()
    assert recorder.built_only() == {}


def test_build_only_round_trips_through_the_footprints_file(tmp_path):
    report = {
        "cases": [
            {
                "id": "m/a/train",
                "footprint": {"toy/layer.py": ["Linear.forward", "helper"]},
                "footprint_build_only": {"toy/layer.py": ["helper"]},
            }
        ]
    }
    recorded = footprints_file.from_reports([report])
    assert recorded.ran_only_building("toy/layer.py::helper") == {"m/a/train"}
    assert not recorded.ran_only_building("toy/layer.py::Linear.forward")
    path = tmp_path / "footprints.json"
    path.write_text(recorded.to_json())
    assert footprints_file.load(path).build_only == recorded.build_only
    merged = footprints_file.merged(recorded, footprints_file.from_reports([{"cases": []}]))
    assert merged.build_only == recorded.build_only


# ----------------------------------------------------------------------------- the selection

BUILT = dataclasses.replace(
    TOY_FOOTPRINTS,
    build_only={"toy/config.py::Config.__post_init__": frozenset({"m/a/train", "m/b/train"})},
)
POST_INIT = "self.scale = self.alpha / self.r"


def test_a_change_to_build_only_code_marks_the_cases_reached_only_while_building(tmp_path):
    head = _toy(tmp_path / "head", {"config.py": BASE["config.py"].replace(POST_INIT, f"{POST_INIT} * 1")})
    chosen = select_between(BUILT, _toy(tmp_path / "base"), head)
    assert chosen.cases == ("m/a/merge", "m/a/train", "m/b/train")
    assert chosen.build_only == ("m/a/train", "m/b/train")  # m/a/merge ran it after its first compile too
    assert "(2 of them only while building their model)" in chosen.reasons[0]


def test_a_case_that_also_ran_changed_step_code_is_not_build_only(tmp_path):
    config = BASE["config.py"].replace(POST_INIT, f"{POST_INIT} * 1")
    layer = BASE["layer.py"].replace("return x + 1", "return x + 2")  # Linear.forward: m/a/train's step code
    head = _toy(tmp_path / "head", {"config.py": config, "layer.py": layer})
    chosen = select_between(BUILT, _toy(tmp_path / "base"), head)
    assert chosen.build_only == ("m/b/train",)


def test_without_build_only_footprints_nothing_is_narrowed(tmp_path):
    head = _toy(tmp_path / "head", {"config.py": BASE["config.py"].replace(POST_INIT, f"{POST_INIT} * 1")})
    assert select_between(TOY_FOOTPRINTS, _toy(tmp_path / "base"), head).build_only == ()


# ----------------------------------------------------------------------------- fingerprints

TOY_BUILD = """
import torch

TABLE = {{}}
REGISTRY = {{"lora": "LoraModel"}}


class Layer(torch.nn.Module):
    def __init__(self, rank):
        super().__init__()
        self.rank = rank
        self.weight = torch.nn.Parameter(torch.ones(rank, 4))


def build():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), Layer({rank}))
    {extra}
    return model
"""
PRINT_FINGERPRINT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import toybuild
from compile_audit.probe import builds
model = toybuild.build()
print(json.dumps(builds.fingerprint(["toybuild"], [model])))
"""


def _fingerprint(tmp_path, name: str, rank: int = 2, extra: str = "pass") -> dict:
    """The fingerprint of a toy package's build, in a fresh interpreter as each side of the gate builds it."""
    root = tmp_path / name
    (root / "toybuild").mkdir(parents=True)
    (root / "toybuild" / "__init__.py").write_text(textwrap.dedent(TOY_BUILD.format(rank=rank, extra=extra)))
    out = subprocess.run(
        [sys.executable, "-c", PRINT_FINGERPRINT, str(root)], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("what", "head"),
    [
        ("a parameter's shape and an attribute", {"rank": 3}),
        ("requires_grad", {"extra": "model[0].weight.requires_grad_(False)"}),
        ("a hook", {"extra": "model[1].register_forward_pre_hook(lambda m, a: None)"}),
        ("an attribute", {"extra": "model[1].scaling = 0.5"}),
        ("a private attribute", {"extra": "model[1]._scale = 2"}),
        ("the training flag", {"extra": "model.eval()"}),
        ("a table the package keeps", {"extra": "TABLE['layer'] = 1"}),
        ("parameter values", {"extra": "torch.nn.init.zeros_(model[0].bias)"}),
        ("a torch setting", {"extra": "torch._dynamo.config.recompile_limit = 3"}),
        ("the random state", {"extra": "torch.rand(1)"}),
    ],
)
def test_a_build_change_that_alters_the_model_keeps_the_case(tmp_path, what, head):
    base = _fingerprint(tmp_path, "base")
    changed = _fingerprint(tmp_path, "head", **head)
    same, run = builds_file.compare(["m/a/train"], {"m/a/train": base}, {"m/a/train": changed})
    assert same == [], what
    assert run["m/a/train"].startswith("built differently: "), run


def test_a_build_change_that_builds_the_same_model_deselects_the_case(tmp_path):
    base = _fingerprint(tmp_path, "base")
    refactored = _fingerprint(tmp_path, "head", extra="model = torch.nn.Sequential(*list(model))")
    same, run = builds_file.compare(["m/a/train"], {"m/a/train": base}, {"m/a/train": refactored})
    assert (same, run) == (["m/a/train"], {})


@pytest.mark.parametrize(
    ("head", "gaining", "same_build"),
    [
        ("REGISTRY['newm'] = 'NewModel'", ("REGISTRY",), True),
        ("REGISTRY['newm'] = 'NewModel'", (), False),  # nothing says the change adds keys to it
        ("REGISTRY['newm'] = 'NewModel'", ("TABLE",), False),  # it says so of another table
        ("REGISTRY['lora'] = 'Other'; REGISTRY['newm'] = 'NewModel'", ("REGISTRY",), False),  # an entry changed
        ("REGISTRY['newm'] = 'NewModel'; model[1].scaling = 0.5", ("REGISTRY",), False),  # and the model
        ("REGISTRY['newm'] = 'NewModel'; globals()['NEWM_TARGETS'] = {'llama': ['q']}", ("REGISTRY",), True),
        ("globals()['NEWM_TARGETS'] = {'llama': ['q']}", (), True),  # a name base did not bind
        ("globals()['TABLE'] = {'llama': ['q']}", (), False),  # a name base bound, rebound
    ],
)
def test_a_build_that_differs_only_by_the_keys_and_names_the_change_adds_builds_the_same(
    tmp_path, head, gaining, same_build
):
    """A new method's registration adds keys to the package's tables; a build whose only difference is those keys
    (every old entry as it was) compiles the same, and the selection covers the code going over them."""
    base = _fingerprint(tmp_path, "base")
    grown = _fingerprint(tmp_path, "head", extra=head)
    same, run = builds_file.compare(["m/a/train"], {"m/a/train": base}, {"m/a/train": grown}, gaining)
    assert (same == ["m/a/train"]) is same_build, run


def test_the_tables_entries_are_written_once_per_run_and_read_back_per_case(tmp_path):
    entries = {"toy.REGISTRY": {"k": "d1"}}
    key = builds_file.entries_key(entries)
    cases = {
        case: {"digest": "1", "modules": [], "package_values": {}, "package_entries": key}
        for case in ("m/a/train", "m/b/train")
    }
    path = tmp_path / "builds.json"
    path.write_text(builds_file.to_json(cases, entries={key: entries}))
    assert path.read_text().count('"d1"') == 1
    assert {case: found["package_entries"] for case, found in builds_file.read(path).items()} == {
        "m/a/train": entries,
        "m/b/train": entries,
    }
    path.write_text(builds_file.to_json(cases))
    with pytest.raises(ValueError, match=rf"builds\.json: case 'm/a/train' names entries '{key}'"):
        builds_file.read(path)


def test_the_selection_names_the_tables_a_change_adds_keys_to(tmp_path):
    roots = []
    for side, text in (
        ("base", "MAPPING = {'llama': ['q']}\n"),
        ("head", "MAPPING = {'llama': ['q']}\nMAPPING['vit'] = []\n"),
    ):
        root = tmp_path / side / "toy"
        root.mkdir(parents=True)
        (root / "__init__.py").write_text("")
        (root / "constants.py").write_text(text)
        roots.append(root)
    chosen = select_between(footprints_file.Footprints(("m/a/x",), {}), *roots)
    assert chosen.tables_gaining == ("MAPPING",), chosen.reasons


def test_a_side_without_a_fingerprint_keeps_the_case():
    base = {"m/a/train": {"digest": "1", "modules": [], "package_values": {}}}
    same, run = builds_file.compare(["m/a/train"], base, {"m/a/train": {"missing": "raised ValueError: no"}})
    assert same == [] and run["m/a/train"] == "no fingerprint (head: raised ValueError: no)"


def _compile_first(models):
    builds.first_compile()


def test_a_fingerprint_run_stops_the_case_at_its_first_compile_with_what_its_frames_hold():
    model, eager = torch.nn.Linear(2, 2), {"twin": torch.nn.Sequential(torch.nn.ReLU())}
    with builds.recording(["tests"]), pytest.raises(builds.BuildFingerprinted) as stopped:
        _compile_first([model, eager])
    roots = [tree["type"] for tree in stopped.value.fingerprint["modules"]]
    assert roots == ["torch.nn.modules.container.Sequential", "torch.nn.modules.linear.Linear"]
    _compile_first([model])  # outside a fingerprint run: nothing happens


def test_a_temporary_folder_s_random_name_is_no_part_of_a_build(tmp_path):
    """The zoo saves a quantized base (and X-LoRA's experts) to a fresh temporary folder and loads it from there: the
    config then names that folder."""
    base, head = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    head.load_state_dict(base.state_dict())
    base.name_or_path, head.name_or_path = str(tmp_path / "quantized-base-a1b2"), str(tmp_path / "quantized-base-c3d4")
    assert builds.fingerprint([], [base])["digest"] == builds.fingerprint([], [head])["digest"]
    head.name_or_path = "a-hub-model-id"
    assert builds.fingerprint([], [base])["digest"] != builds.fingerprint([], [head])["digest"]


def test_where_torch_is_installed_is_no_part_of_a_build():
    """Each side of the gate has its own venv: torch settings that hold a path differ by the venv alone."""
    model = torch.nn.Linear(2, 2)
    with torch._dynamo.config.patch(debug_dir_root="/base/venv/torch_compile_debug"):
        base = builds.fingerprint(["tests"], [model])
    with torch._dynamo.config.patch(debug_dir_root="/head/venv/torch_compile_debug"):
        assert builds.fingerprint(["tests"], [model])["digest"] == base["digest"]
    with torch._dynamo.config.patch(debug_dir_root="/base/venv/torch_compile_debug", recompile_limit=3):
        assert builds.fingerprint(["tests"], [model])["digest"] != base["digest"]


def test_a_tensor_subclass_is_fingerprinted_by_the_tensors_it_is_made_of():
    """torchao's quantized weights are tensor subclasses whose bytes cannot be viewed: their inner tensors are."""
    from torch.testing._internal.two_tensor import TwoTensor

    def linear(second: float) -> torch.nn.Linear:
        torch.manual_seed(0)  # the fingerprint holds the random state, as a case's seeded build leaves it
        layer = torch.nn.Linear(2, 2, bias=False)
        layer.weight = torch.nn.Parameter(TwoTensor(torch.ones(2, 2), torch.full((2, 2), second)), requires_grad=False)
        return layer

    assert builds.fingerprint([], [linear(0.0)])["digest"] == builds.fingerprint([], [linear(0.0)])["digest"]
    assert builds.fingerprint([], [linear(0.0)])["digest"] != builds.fingerprint([], [linear(1.0)])["digest"]


def test_a_method_bound_over_a_partial_reads_the_same_in_two_builds():
    """torchao sets a quantized layer's extra_repr to a method over a functools.partial, whose repr holds addresses."""
    import functools
    import types

    def described() -> object:
        def extra_repr(module, parameter_name):  # a function object of its own each build, as in each process
            return parameter_name

        layer = torch.nn.Linear(2, 2)
        layer.extra_repr = types.MethodType(functools.partial(extra_repr, parameter_name="weight"), layer)
        return builds.describe(layer.extra_repr)

    assert described() == described()


def test_a_name_the_change_binds_anew_differs_alone_and_builds_the_same(tmp_path):
    """The change's own statement rebinds ``TABLE`` (an import now taken from another module): its readers are
    selected on their own, so a build that differs by its value alone builds the same; by anything else, not."""
    base = _fingerprint(tmp_path, "base")
    rebound = _fingerprint(tmp_path, "head", extra="globals()['TABLE'] = {'llama': ['q']}")
    both = _fingerprint(tmp_path, "both", extra="globals()['TABLE'] = {'llama': ['q']}; model[1].scaling = 0.5")
    assert builds_file.compare(["m/a/train"], {"m/a/train": base}, {"m/a/train": rebound}, (), ("toybuild.TABLE",))[0]
    assert not builds_file.compare(["m/a/train"], {"m/a/train": base}, {"m/a/train": both}, (), ("toybuild.TABLE",))[0]


def test_the_selection_names_the_module_level_names_a_change_binds_anew(tmp_path):
    base, head = (
        {"constants.py": "TABLE = {'a': 1}\n", "other.py": "TABLE = {'a': 1}\n", "save.py": text}
        for text in (
            "from .constants import TABLE\n\nCOPY = dict(TABLE)\n",
            "from .other import TABLE\n\nCOPY = dict(TABLE)\n",
        )
    )
    chosen = select_between(footprints_file.Footprints(("m/a/x",), {}), *_packages(tmp_path, base, head))
    assert chosen.names_rebound == ("toy.save.COPY", "toy.save.TABLE"), chosen.reasons


BUILDING = """LIMIT = 4


class Layer:
    toy_scale_factor = 1

    def __init__(self):
        self.width = 0 if hasattr(self, "width_of") else LIMIT * self.toy_scale_factor

    def forward(self, x):
        return self.helper(x)

    def helper(self, x):
        return x
"""


@pytest.mark.parametrize(
    "what, old, new",
    [
        ("a module constant", "LIMIT = 4", "LIMIT = 8"),
        ("a class attribute", "    toy_scale_factor = 1", "    toy_scale_factor = 2"),
        (
            "an added method",
            "    toy_scale_factor = 1\n",
            "    toy_scale_factor = 1\n\n    def width_of(self):\n        return 0\n",
        ),
    ],
)
def test_a_name_read_only_while_building_reaches_its_readers_cases_only_while_building(tmp_path, what, old, new):
    """m/a/x ran ``__init__`` only while building; m/b/x also built again later (a case that re-creates its layer):
    a change read only in ``__init__`` reaches m/a/x only while building (its builds are compared first)."""
    roots = _packages(tmp_path, {"layer.py": BUILDING}, {"layer.py": BUILDING.replace(old, new)})
    both = frozenset({"m/a/x", "m/b/x"})
    footprints = footprints_file.Footprints(
        ("m/a/x", "m/b/x"),
        {"toy/layer.py::Layer.__init__": both, "toy/layer.py::Layer.forward": both},
        build_only={"toy/layer.py::Layer.__init__": frozenset({"m/a/x"})},
    )
    chosen = select_between(footprints, *roots)
    assert chosen.cases == ("m/a/x", "m/b/x"), (what, chosen.reasons)
    assert chosen.build_only == ("m/a/x",), (what, chosen.reasons)


# ------------------------------------------------------------------------------ what a case did before compiling


def _case_body(checks, reference, saved_to, payload):
    """A case's body up to its first compile: the checks it made, an eager reference it keeps, a file it saved."""
    model = torch.nn.Linear(2, 2)
    expected = {"logits": reference}
    (saved_to / "adapter.bin").write_bytes(payload)
    builds.first_compile(checks)
    return model, expected


def _fingerprinted(checks=(), reference=0.0, payload=b"adapter"):
    """A fingerprint run of the toy case body, its file saved to a fresh temporary folder (as each side's is)."""
    folder = Path(tempfile.mkdtemp())
    torch.manual_seed(0)
    with builds.recording(["tests"]), pytest.raises(builds.BuildFingerprinted) as stopped:
        _case_body(list(checks), torch.full((2,), reference), folder, payload)
    return stopped.value.fingerprint


@pytest.mark.parametrize(
    ("what", "head"),
    [
        ("a check that failed before the first compile", {"checks": [("hot-swap preparation", "requires_grad")]}),
        ("an eager reference output the case keeps", {"reference": 1.0}),
        ("a file the case saved to load later", {"payload": b"another adapter"}),
    ],
)
def test_what_a_case_did_before_compiling_keeps_it_though_its_modules_built_the_same(what, head):
    """peft#3241 undone: the hot-swap case makes a model, checks it and drops it before its first compile; its modules
    build the same, its check does not."""
    base, changed = _fingerprinted(), _fingerprinted(**head)
    assert base["modules"] == changed["modules"] and base["package_values"] == changed["package_values"]
    same, run = builds_file.compare(["m/a/hotswap"], {"m/a/hotswap": base}, {"m/a/hotswap": changed})
    assert same == [], what
    assert run["m/a/hotswap"].startswith("built differently: ") and " differs" in run["m/a/hotswap"], run
    # Without the state the two fingerprints would be one build: the state is what tells them apart.
    stripped = [
        {**fp, "state": {}, "digest": builds_file.entries_key([fp["modules"], fp["package_values"]])}
        for fp in (base, changed)
    ]
    assert builds_file.same_build(*stripped)


def test_the_same_pre_compile_state_in_two_temporary_folders_builds_the_same():
    base = _fingerprinted(checks=[("parity", f"differs at {tempfile.mkdtemp()}/x")])
    head = _fingerprinted(checks=[("parity", f"differs at {tempfile.mkdtemp()}/x")])
    assert any(key.startswith("file ") for key in base["state"]) and any("tensor" in key for key in base["state"])
    assert builds_file.compare(["m/a/t"], {"m/a/t": base}, {"m/a/t": head}) == (["m/a/t"], {})


def test_a_variant_switch_a_change_adds_switched_off_builds_the_same_and_switched_on_does_not():
    """A pull request adding a LoRA variant adds a config field (``is_lora_variant``) that every existing config holds
    switched off: PEFT builds nothing of it, so it is no part of the build; switched on, it is."""

    @dataclasses.dataclass
    class Base:
        r: int = 8

    @dataclasses.dataclass
    class Head:
        r: int = 8
        use_new: bool = dataclasses.field(default=False, metadata={"is_lora_variant": True})

    def described(config) -> object:
        described = builds.describe(config)
        described["type"] = "config"  # the two toy classes stand for one class in two versions of the package
        return described

    assert described(Base()) == described(Head())
    assert described(Base()) != described(Head(use_new=True))
    assert described(Base()) != described(Head(r=4))


def test_a_compile_outside_the_audit_is_the_case_s_first(monkeypatch):
    """save-load compiles the model users save from before it audits anything: a fingerprint run stops there, before
    Dynamo traces, and what the case runs after it (saving, reloading) ran after the build."""
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: compiled.append(fn) or fn)
    audit = CaseAudit("toy/clean/save-load", Budget())
    with FootprintRecorder(["tests"]) as recorder:
        build()
        model = audit.compile_unaudited(torch.nn.Linear(2, 2), backend="eager")
        step()
    built = set(recorder.built_only()[HERE])
    assert "build_twice" in built and "step" not in built
    assert compiled == [model]
    with builds.recording(["tests"]), pytest.raises(builds.BuildFingerprinted):
        CaseAudit("toy/clean/save-load", Budget()).compile_unaudited(torch.nn.ReLU(), backend="eager")
    assert compiled == [model], "a fingerprint run compiled before it fingerprinted"

"""The scratch venv's environment (gate_tools.venv), as the gate and bisect each build it: every caller setting that
would point Python or pip at another environment, or share compiled artifacts between runs, is left out.

The variables are listed here, not read from the module: dropping one from the builder fails its test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from gate_tools import sides
from gate_tools.bisect.lab import Lab
from gate_tools.venv import ScratchVenv

pytestmark = pytest.mark.selftest

CALLER = "/caller/elsewhere"
# Each must not reach a command of the scratch venv with the caller's value.
CALLER_ONLY = (
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PYTHONHOME",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONSAFEPATH",
    "PYTHONUSERBASE",
    "PIP_USER",
    "PIP_TARGET",
    "PIP_PREFIX",
    "PIP_ROOT",
    "PIP_REQUIRE_VIRTUALENV",
    "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE",
    "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE",
    "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE",
    "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE",
)
# Each points into the run's own cache directory, whatever the caller set.
CACHES = {"TORCHINDUCTOR_CACHE_DIR": "inductor-cache", "TRITON_CACHE_DIR": "triton-cache"}
SETTINGS = {"PYTHONNOUSERSITE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


def caller_environ() -> dict[str, str]:
    return {"PATH": "/usr/bin", "HOME": "/home/me", **{name: CALLER for name in (*CALLER_ONLY, *CACHES)}}


def builder_env(environ, tmp_path):
    scratch = ScratchVenv(tmp_path / "venv", tmp_path / "caches")
    return scratch.env(environ), scratch.path, scratch.caches


def gate_env(environ, tmp_path, monkeypatch):
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    side = sides.Side("head", "peft", tmp_path / "out", tmp_path / "work" / "head")
    return side.env(tmp_path / "snapshot"), side.venv, side.work


def bisect_env(environ, tmp_path):
    lab = Lab(tmp_path / "work", tmp_path, "llama-tiny/lora/train-eval-train", environ=environ)
    return lab.env, lab.venv, tmp_path / "work" / "caches" / "00"


BUILDERS: dict[str, Callable] = {
    "builder": lambda environ, tmp_path, monkeypatch: builder_env(environ, tmp_path),
    "gate": gate_env,
    "bisect": lambda environ, tmp_path, monkeypatch: bisect_env(environ, tmp_path),
}


@pytest.fixture(params=sorted(BUILDERS))
def built(request, tmp_path, monkeypatch):
    """(env, venv, caches) of one tool's scratch venv, built from an environment that sets every variable."""
    return (request.param, *BUILDERS[request.param](caller_environ(), tmp_path, monkeypatch))


@pytest.mark.parametrize("name", CALLER_ONLY)
def test_the_callers_setting_does_not_reach_the_venv(built, name):
    tool, env, venv, _ = built
    if tool == "gate" and name == "PYTHONPATH":
        assert env[name] == str(venv.parents[2] / "snapshot")  # the gate's own: its snapshot of the checkout
    elif name == "VIRTUAL_ENV":
        assert env[name] == str(venv)
    else:
        assert name not in env, f"{tool}: {name}={env.get(name)!r} reaches the scratch venv"


@pytest.mark.parametrize("name", sorted(CACHES))
def test_compile_caches_are_the_runs_own(built, name):
    tool, env, _, caches = built
    assert env[name] == str(caches / CACHES[name]), f"{tool}: {name}={env.get(name)!r}"


def test_the_venv_comes_first_and_the_user_site_is_off(built):
    tool, env, venv, _ = built
    assert env["PATH"] == f"{venv / 'bin'}{os.pathsep}/usr/bin", tool
    assert {name: env.get(name) for name in SETTINGS} == SETTINGS, tool
    assert env["HOME"] == "/home/me", tool  # everything else is the caller's


def test_a_python_run_with_it_sees_nothing_of_the_callers(tmp_path):
    """The real interpreter: the caller's PYTHONPATH is not on sys.path, and there is no user site."""
    environ = {**os.environ, "PYTHONPATH": str(tmp_path / "caller-src"), "PYTHONUSERBASE": str(tmp_path / "user")}
    env = ScratchVenv(tmp_path / "venv", tmp_path / "caches").env(environ)
    code = "import json, site, sys; print(json.dumps([sys.path, site.ENABLE_USER_SITE]))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    path, user_site = json.loads(done.stdout)
    assert str(tmp_path / "caller-src") not in path
    assert user_site is False


def test_the_venv_is_created_by_the_running_python(tmp_path):
    scratch = ScratchVenv(tmp_path / "venv", tmp_path / "caches")
    assert scratch.create_command() == [sys.executable, "-m", "venv", str(tmp_path / "venv")]
    assert scratch.python == tmp_path / "venv" / "bin" / "python"

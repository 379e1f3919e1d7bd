"""The scratch virtualenv of a tool run: where it is, the command that creates it, and the environment every command
in it runs with.

The gate (one venv per side) and bisect (one per run, its compile caches per step) both build theirs here, so both
leave out the same caller settings:

- Python: ``VIRTUAL_ENV``, ``CONDA_PREFIX``, ``PYTHONHOME``, ``PYTHONPATH``, ``PYTHONSTARTUP``, ``PYTHONSAFEPATH``,
  ``PYTHONUSERBASE``; the user site is off (``PYTHONNOUSERSITE=1``);
- pip: ``PIP_USER``, ``PIP_TARGET``, ``PIP_PREFIX``, ``PIP_ROOT``, ``PIP_REQUIRE_VIRTUALENV`` (pip installs into the
  venv and nowhere else); no prompt, no version check;
- torch's compile caches: ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` point into the run's own cache
  directory, and the remote caches (``TORCHINDUCTOR_*_REMOTE_CACHE``) are off: compiled artifacts of one run (one
  PEFT, one torch) never serve another.

``PATH`` starts with the venv's ``bin``. A tool adds what it sets on purpose (the gate's ``PYTHONPATH``: its
snapshot of the checkout) through ``env(**settings)``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from pathlib import Path

CALLER_ONLY = (
    # Another interpreter, environment, path, startup file or user site.
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PYTHONHOME",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONSAFEPATH",
    "PYTHONUSERBASE",
    # pip installing somewhere other than the venv.
    "PIP_USER",
    "PIP_TARGET",
    "PIP_PREFIX",
    "PIP_ROOT",
    "PIP_REQUIRE_VIRTUALENV",
    # Compiled artifacts shared through a remote cache.
    "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE",
    "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE",
    "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE",
    "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE",
)
# Each compile cache and its directory under the run's cache directory.
CACHE_DIRS = {"TORCHINDUCTOR_CACHE_DIR": "inductor-cache", "TRITON_CACHE_DIR": "triton-cache"}
SETTINGS = {"PYTHONNOUSERSITE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


@dataclasses.dataclass(frozen=True)
class ScratchVenv:
    path: Path  # the venv
    caches: Path  # its compile caches live under here

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def create_command(self) -> list[str]:
        """Creates the venv with the Python running the tool (whose version the venv gets)."""
        return [sys.executable, "-m", "venv", str(self.path)]

    def env(self, environ: Mapping[str, str] | None = None, **settings: str) -> dict[str, str]:
        """environ (default: this process's) without the caller-only settings, pointed at this venv and its caches,
        then settings."""
        environ = os.environ if environ is None else environ
        env = {key: value for key, value in environ.items() if key not in CALLER_ONLY}
        env.update(SETTINGS)
        env.update(VIRTUAL_ENV=str(self.path), PATH=f"{self.bin}{os.pathsep}{environ.get('PATH', '')}")
        env.update({name: str(self.caches / directory) for name, directory in CACHE_DIRS.items()})
        env.update(settings)
        return env

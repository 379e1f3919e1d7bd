"""The releases a package index has between two versions (both included), oldest first.

The list comes from ``pip index versions`` run by this Python with the given pip options (so a private
index or a local wheel directory counts), or, when that fails, from the PyPI JSON API. Versions that
differ only by a local label (``2.13.0`` and ``2.13.0+cpu``) are one release: installing ``==2.13.0``
lets pip pick the build. Pre-releases (``rc``, ``a``, ``b``, ``dev``) count only when asked for.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable

from packaging.version import InvalidVersion, Version

PYPI_JSON = "https://pypi.org/pypi/{package}/json"
QUERY_TIMEOUT = 120


class ReleaseError(ValueError):
    """The versions cannot be listed or do not bracket a range; the message is one line."""


def parse_pip_index(output: str) -> list[str]:
    """The versions of ``pip index versions`` output (its ``Available versions:`` line)."""
    for line in output.splitlines():
        if line.strip().startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    raise ReleaseError("pip index versions printed no 'Available versions:' line")


def from_pip(package: str, pip_options: Iterable[str], pre: bool) -> list[str]:
    command = [sys.executable, "-m", "pip", "index", "versions", package, *pip_options, *(["--pre"] if pre else [])]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=QUERY_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ReleaseError(f"pip index versions {package}: {error}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ReleaseError(f"pip index versions {package} failed: {last}")
    return parse_pip_index(done.stdout)


def from_pypi_json(package: str) -> list[str]:
    try:
        with urllib.request.urlopen(PYPI_JSON.format(package=package), timeout=QUERY_TIMEOUT) as response:
            data = json.load(response)
    except (OSError, urllib.error.URLError, json.JSONDecodeError) as error:
        raise ReleaseError(f"{PYPI_JSON.format(package=package)}: {error}") from None
    releases = data.get("releases") if isinstance(data, dict) else None
    if not isinstance(releases, dict):
        raise ReleaseError(f"{PYPI_JSON.format(package=package)}: no 'releases' mapping")
    return [version for version, files in releases.items() if files and not all(f.get("yanked") for f in files)]


def available(package: str, pip_options: Iterable[str] = (), pre: bool = False) -> list[str]:
    """Every version the index has (pip first, then PyPI's JSON API); ReleaseError naming both failures."""
    try:
        return from_pip(package, list(pip_options), pre)
    except ReleaseError as pip_error:
        try:
            return from_pypi_json(package)
        except ReleaseError as json_error:
            raise ReleaseError(f"cannot list {package} releases: {pip_error}; {json_error}") from None


def _version(text: str, option: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise ReleaseError(f"{option} {text!r} is not a version") from None


def _releases(versions: Iterable[str], pre: bool) -> dict[Version, str]:
    """Public version -> its text without a local label, pre-releases dropped unless asked for."""
    releases: dict[Version, str] = {}
    for text in versions:
        try:
            version = Version(Version(text).public)
        except InvalidVersion:
            continue
        if pre or not version.is_prerelease:
            releases[version] = str(version)
    return releases


def between(versions: Iterable[str], good: str, bad: str, pre: bool = False) -> list[str]:
    """good, every release strictly between, bad: oldest first; ReleaseError when they bracket nothing."""
    good_version = Version(_version(good, "--good").public)
    bad_version = Version(_version(bad, "--bad").public)
    if good_version == bad_version:
        raise ReleaseError(f"--good and --bad are the same release ({good_version})")
    if good_version > bad_version:
        raise ReleaseError(f"--good {good} is newer than --bad {bad}: good is the older release, bad the newer")
    releases = _releases(versions, pre)
    for option, version in (("--good", good_version), ("--bad", bad_version)):
        if version not in releases:
            hint = "" if pre else " (pre-releases count only with --pre)"
            raise ReleaseError(f"{option} {version} is not among the index's releases{hint}")
    return [releases[v] for v in sorted(releases) if good_version <= v <= bad_version]

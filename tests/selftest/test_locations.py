"""One location for one line of a package, however the package is installed: budgets recorded against an
installed PEFT hold for a PEFT developer's source checkout."""

from __future__ import annotations

import pytest

from compile_audit.locations import location, short_path

pytestmark = pytest.mark.selftest


def _package(root, *parts: str):
    directory = root
    for part in parts[:-1]:
        directory = directory / part
        directory.mkdir(exist_ok=True)
        (directory / "__init__.py").touch()
    path = directory / parts[-1]
    path.write_text("x = 1\n")
    return str(path)


def test_a_source_tree_reads_as_the_installed_package(tmp_path):
    checkout = tmp_path / "home" / "u" / "peft" / "src"
    checkout.mkdir(parents=True)
    source = _package(checkout, "peft", "tuners", "lora", "layer.py")
    installed = "/venv/lib/python3.11/site-packages/peft/tuners/lora/layer.py"
    assert short_path(source) == short_path(installed) == "peft/tuners/lora/layer.py"
    assert location(source, 712) == "peft/tuners/lora/layer.py:712"


def test_a_module_outside_any_package_keeps_its_path(tmp_path):
    loose = tmp_path / "loose.py"
    loose.write_text("x = 1\n")
    assert short_path(str(loose)) == str(loose)

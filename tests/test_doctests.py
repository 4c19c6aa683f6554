"""Every ``>>>`` example in tailcut's modules runs and prints what its docstring says.

Every package the distribution installs is walked (the list comes from ``pyproject.toml``, so a new
package is covered without editing this file). Examples that change the process for good (``tailcut.init``
installs the global tracer provider) run in a fresh interpreter of their own.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
#: Every package the distribution installs.
PACKAGES = tuple(tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
#: Modules whose examples set process-wide state: each runs in its own interpreter.
ISOLATED = frozenset({"tailcut._setup"})
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def modules() -> list[str]:
    names = set(PACKAGES)
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        names.update(info.name for info in pkgutil.walk_packages(path, prefix=f"{package}."))
    return sorted(name for name in names if not name.endswith("__main__"))


def with_examples() -> list[str]:
    finder = doctest.DocTestFinder()
    return [
        name
        for name in modules()
        if any(test.examples for test in finder.find(importlib.import_module(name)))
    ]


def test_every_installed_package_is_walked():
    assert {"tailcut", "tailcut.ui", "tailcut.testing", "tailcut.exporters.conventions"} <= set(PACKAGES)
    walked = {name.rsplit(".", 1)[0] for name in modules()} | set(modules())
    assert set(PACKAGES) <= walked


def test_the_entry_points_a_newcomer_meets_first_have_examples():
    names = set(with_examples())
    for module in ("tailcut._setup", "tailcut._run", "tailcut.analysis._dataset", "tailcut.analysis._select"):
        assert module in names, module
    assert "tailcut.ui" in names


@pytest.mark.parametrize("name", with_examples())
def test_module_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    if name in ISOLATED:
        script = (
            "import doctest, importlib, sys\n"
            f"result = doctest.testmod(importlib.import_module({name!r}), optionflags={FLAGS})\n"
            "sys.exit(0 if result.attempted and not result.failed else 1)\n"
        )
        ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        return
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=FLAGS)
    assert result.attempted > 0
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"

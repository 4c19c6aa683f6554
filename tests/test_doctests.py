"""Every ``>>>`` example in tailcut's modules runs and prints what its docstring says."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

#: The installed packages; each component is its own folder, so each is walked from its own path.
PACKAGES = (
    "tailcut",
    "tailcut.collector",
    "tailcut.exporters",
    "tailcut.analysis",
    "tailcut.replay",
    "tailcut.demo",
)


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


@pytest.mark.parametrize("name", with_examples())
def test_module_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"

"""DESIGN.md section 1's "may import" table holds: import-linter's contracts (``pyproject.toml``) kept.

import-linter reads a package from its folder, and ``tailcut``'s components are not under ``sdk/`` (the
``package-dir`` mapping installs them there), so the sources are copied into a temporary tree laid out as
the installed package and linted there, in a subprocess that finds that tree first. Imports inside
functions count (import-linter reads every import statement); those under ``TYPE_CHECKING`` do not.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
LINT = "import sys, importlinter.cli as c; sys.exit(c.lint_imports(sys.argv[1], no_cache=True))"


def settings() -> dict[str, Any]:
    return tomllib.loads(PYPROJECT.read_text())["tool"]


def stage(target: Path) -> Path:
    """The ``.py`` files of every package, copied to where ``package-dir`` installs them, under ``target``."""
    for package, folder in settings()["setuptools"]["package-dir"].items():
        destination = target.joinpath(*package.split("."))
        destination.mkdir(parents=True, exist_ok=True)
        for source in (ROOT / folder).glob("*.py"):
            shutil.copy2(source, destination / source.name)
    return target


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [sys.executable, "-c", LINT, str(PYPROJECT)],
        cwd=tree,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def contract(kind: str, name_start: str) -> dict[str, Any]:
    (found,) = [
        c
        for c in settings()["importlinter"]["contracts"]
        if c["type"] == kind and c["name"].startswith(name_start)
    ]
    return found


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stage(tmp_path_factory.mktemp("layers"))


def test_the_sources_keep_every_contract(tree: Path) -> None:
    result = lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    contracts = len(settings()["importlinter"]["contracts"])
    assert f"Contracts: {contracts} kept, 0 broken." in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # storage calling up into analysis from inside a function, as the writer once did
        ("exporters/_writer.py", "from tailcut.analysis._features_worker import FeatureHook", "Components"),
        ("collector/_sink.py", "from tailcut.analysis._refresh import refresh", "Components"),
        ("replay/__init__.py", "from tailcut.collector import Collector", "The replay and the UI"),
        ("_version.py", "import duckdb", "The SDK imports no component"),
        ("_version.py", "from tailcut.exporters import schema", "The SDK imports no component"),
        ("analysis/_features.py", "from tailcut.analysis import _features_coverage", "No cycles"),
    ],
)
def test_an_import_against_the_table_breaks_a_contract(
    tmp_path: Path, tree: Path, module: str, line: str, broken: str
) -> None:
    copy = tmp_path / "tree"
    shutil.copytree(tree, copy)
    path = copy / "tailcut" / module
    assert path.is_file(), path
    with path.open("a") as file:
        file.write(f"\n\ndef _against_the_table():\n    {line}\n")
    result = lint(copy)
    assert result.returncode == 1, result.stdout + result.stderr
    report = " ".join(result.stdout.split())  # contract names may wrap
    names = [c["name"] for c in settings()["importlinter"]["contracts"]]
    (name,) = [n for n in names if n.startswith(broken)]
    assert f"{name} BROKEN" in report, result.stdout


def components() -> set[str]:
    layers = contract("layers", "Components")["layers"]
    return {name.strip() for layer in layers for name in layer.split("|")}


def test_every_module_of_the_sdk_is_held_by_the_sdk_contract(tree: Path) -> None:
    listed = set(contract("forbidden", "The SDK")["source_modules"])
    package = tree / "tailcut"
    children = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    children |= {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    sdk = {f"tailcut.{name}" for name in children - components()}
    assert sdk == listed, f"add {sorted(sdk - listed)}, remove {sorted(listed - sdk)} in pyproject.toml"


def test_the_sdk_package_itself_imports_only_the_sdk() -> None:
    listed = set(contract("forbidden", "The SDK")["source_modules"])
    imported = {
        node.module
        for node in ast.walk(ast.parse((ROOT / "sdk" / "__init__.py").read_text()))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tailcut")
    }
    assert imported and {".".join(name.split(".")[:2]) for name in imported} <= listed

"""Every ``TAILCUT_*`` variable is read in ``sdk/environment.py`` and nowhere else (an AST scan)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tailcut import environment

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sdk", "exporters", "collector", "analysis", "replay", "ui", "demo")
HOME = ROOT / "sdk" / "environment.py"


def _is_environ(node: ast.AST) -> bool:
    """``os.environ`` or a bare ``environ`` (``from os import environ``)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id == "environ"


def _environment_reads(tree: ast.AST) -> list[tuple[int, ast.expr | None]]:
    """``(line, key expression)`` of every read of the process environment in ``tree``."""
    reads: list[tuple[int, ast.expr | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            function = node.func
            key = node.args[0] if node.args else None
            if isinstance(function, ast.Attribute) and function.attr in ("get", "pop", "setdefault"):
                if _is_environ(function.value):
                    reads.append((node.lineno, key))
            elif (isinstance(function, ast.Attribute) and function.attr in ("getenv", "getenvb")) or (
                isinstance(function, ast.Name) and function.id == "getenv"
            ):
                reads.append((node.lineno, key))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
            reads.append((node.lineno, node.slice))
    return reads


def _allowed(key: ast.expr | None) -> bool:
    """A read is fine elsewhere only with a literal name that is not tailcut's (``AWS_REGION``)."""
    return (
        isinstance(key, ast.Constant) and isinstance(key.value, str) and not key.value.startswith("TAILCUT_")
    )


def _offenders(source: str, name: str) -> list[str]:
    return [f"{name}:{line}" for line, key in _environment_reads(ast.parse(source)) if not _allowed(key)]


def test_no_module_outside_environment_reads_a_tailcut_variable() -> None:
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path != HOME:
                offenders += _offenders(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert offenders == [], "read TAILCUT_* variables through tailcut.environment, not os.environ"


@pytest.mark.parametrize(
    "source",
    [
        'import os\nos.environ.get("TAILCUT_PRICING")',
        'import os\nos.environ["TAILCUT_UI_TOKEN"]',
        'import os\nos.getenv("TAILCUT_INLINE_LIMIT", "1")',
        "import os\nNAME = 'X'\nos.environ.get(NAME)",  # a name the scan cannot see through is refused
        'from os import environ, getenv\nenviron.get("TAILCUT_X")\ngetenv("TAILCUT_Y")',
    ],
)
def test_the_scan_sees_every_way_of_reading_one(source: str) -> None:
    assert _offenders(source, "m")


def test_the_scan_lets_other_variables_and_writes_pass() -> None:
    source = 'import os\nos.environ.get("AWS_REGION")\nos.environ["TAILCUT_DEMO_MODEL_URL"] = "u"'
    assert _offenders(source, "m") == []


def test_every_variable_is_a_documented_constant() -> None:
    names = [n for n in dir(environment) if n.startswith("TAILCUT_")]
    assert {"TAILCUT_PRICING", "TAILCUT_UI_TOKEN", "TAILCUT_DEMO_MODEL_URL", "TAILCUT_PAYLOAD_DIR"} <= set(
        names
    )
    lines = HOME.read_text(encoding="utf-8").splitlines()
    for name in names:
        assert getattr(environment, name) == name
        line = next(n for n, text in enumerate(lines) if text.startswith(f"{name}: Final"))
        assert lines[line - 1].startswith("#: "), f"{name} has no #: comment saying what it does"


def test_accessors_read_the_variable_and_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(environment.TAILCUT_PRICING, raising=False)
    monkeypatch.setenv(environment.TAILCUT_DEMO_MODEL_URL, "  ")
    assert environment.pricing_file() is None
    assert environment.demo_model_url("http://127.0.0.1:1/v1") == "http://127.0.0.1:1/v1"
    monkeypatch.setenv(environment.TAILCUT_PRICING, "prices.toml")
    monkeypatch.setenv(environment.TAILCUT_DEMO_MODEL_URL, "http://127.0.0.1:2/v1")
    assert environment.pricing_file() == "prices.toml"
    assert environment.demo_model_url("http://127.0.0.1:1/v1") == "http://127.0.0.1:2/v1"

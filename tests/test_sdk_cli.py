"""The command group turns only a missing optional dependency into an install hint, never a bug."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from tailcut.cli import COMMANDS, cli

#: Command modules that fail to import, each for one reason.
TARGETS = {
    "needs_duckdb": "import duckdb\n\ndef cmd(): ...\n",
    "needs_a_duckdb_submodule": "import duckdb.no_such_submodule_for_test\n\ndef cmd(): ...\n",
    "internal_name": "from tailcut._config import no_such_name_for_test\n\ndef cmd(): ...\n",
    "internal_module": "import tailcut.no_such_module_for_test\n\ndef cmd(): ...\n",
}


@pytest.fixture
def command_from(tmp_path, monkeypatch):
    """Register a lazy command whose target is one of :data:`TARGETS`; returns its name."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def register(target: str) -> str:
        module = f"tailcut_cli_target_{target}"
        (tmp_path / f"{module}.py").write_text(TARGETS[target])
        monkeypatch.delitem(sys.modules, module, raising=False)
        monkeypatch.setitem(COMMANDS, "broken", (f"{module}:cmd", "A test command."))
        return "broken"

    return register


def test_a_missing_optional_dependency_names_the_install(command_from, monkeypatch):
    monkeypatch.setitem(sys.modules, "duckdb", None)  # as if duckdb were not installed
    result = CliRunner().invoke(cli, [command_from("needs_duckdb")])
    assert result.exit_code == 1
    assert result.output == (
        'Error: `tailcut broken` needs duckdb: install it with pip install "tailcut[pipeline]"\n'
    )


def test_a_missing_module_of_an_installed_dependency_names_the_install(command_from):
    result = CliRunner().invoke(cli, [command_from("needs_a_duckdb_submodule")])
    assert result.exit_code == 1
    assert 'pip install "tailcut[pipeline]"' in result.output


@pytest.mark.parametrize("target", ["internal_name", "internal_module"])
def test_an_import_error_inside_tailcut_propagates(command_from, target):
    result = CliRunner().invoke(cli, [command_from(target)])
    assert isinstance(result.exception, ImportError)
    assert "no_such_" in str(result.exception)
    assert "pip install" not in result.output

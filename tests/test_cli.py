"""The `tailcut` command group: fast help, version, and a clear message when the pipeline is missing."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from tailcut import __version__
from tailcut.cli import COMMANDS, cli


def test_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"tailcut, version {__version__}"


def test_help_lists_every_command_without_importing_components():
    code = (
        "import sys; from click.testing import CliRunner; from tailcut.cli import cli; "
        "r = CliRunner().invoke(cli, ['--help']); print(r.output); "
        "print('LOADED', sorted(m for m in sys.modules if m.split('.')[:2] in "
        "(['tailcut','collector'],['tailcut','analysis'],['tailcut','replay'],['tailcut','demo'],"
        "['tailcut','exporters']) or m in ('pyarrow','duckdb','polars')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    for name in COMMANDS:
        assert name in done.stdout
    assert "LOADED []" in done.stdout


def test_every_command_has_help_text():
    for name, (target, summary) in COMMANDS.items():
        assert summary.endswith("."), name
        assert ":" in target, name


def test_missing_pipeline_dependency_names_the_fix(monkeypatch):
    monkeypatch.setitem(COMMANDS, "broken", ("tailcut_missing_module_for_test:cmd", "A test command."))
    result = CliRunner().invoke(cli, ["broken"])
    assert result.exit_code != 0
    assert 'pip install "tailcut[pipeline]"' in result.output
    assert "Traceback" not in result.output


def test_unknown_command():
    result = CliRunner().invoke(cli, ["no-such-command"])
    assert result.exit_code == 2
    assert "No such command" in result.output

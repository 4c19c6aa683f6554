"""Every command has help and is documented in the README; the Quickstart holds exactly two commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tailcut.cli import COMMANDS, cli

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_command_has_help_and_readme_documents_it(command):
    result = CliRunner().invoke(cli, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage: " in result.output
    description = result.output.split("\n\n")[1].strip()
    assert len(description) > 20, f"tailcut {command} --help has no description"
    assert re.search(rf"tailcut {re.escape(command)}\b", README), f"README does not show `tailcut {command}`"


def test_quickstart_has_exactly_two_commands_install_and_demo_then_tests():
    quickstart = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.+?)\n```", quickstart, flags=re.S)
    assert len(commands) == 2
    assert commands[0].strip().endswith("tailcut demo")
    assert "pytest" in commands[1]
    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1].split("&& ", 2)[-1].strip() in ci  # CI runs the README's install and test step

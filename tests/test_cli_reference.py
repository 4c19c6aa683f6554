"""``docs/cli.md`` is what the commands print: regenerate it with ``python docs/cli_reference.py``."""

from __future__ import annotations

import runpy
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_cli_reference_is_current():
    reference = runpy.run_path(str(DOCS / "cli_reference.py"))
    expected = reference["render"]()
    current = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert current == expected, "docs/cli.md is stale: run `python docs/cli_reference.py`"

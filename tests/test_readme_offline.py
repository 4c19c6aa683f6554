"""The README's "Test your agent offline" example runs as written, so it cannot rot.

The block is a complete script: it runs in a fresh interpreter in an empty directory, as a user would
run it after copying it, and its own asserts check the recorded and the replayed run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
MARKER = "<!-- readme-offline-example: tests/test_readme_offline.py runs this block -->"


def offline_example() -> str:
    """The fenced Python block right after the marker in the README."""
    text = README.read_text(encoding="utf-8")
    assert text.count(MARKER) == 1, "the README must mark exactly one offline example"
    section = text.split("## Test your agent offline", 1)[1].split("\n## ", 1)[0]
    assert MARKER in section, "the offline example must sit in its README section"
    match = re.match(r"\s*```python\n(.*?)\n```", section.split(MARKER, 1)[1], flags=re.S)
    assert match, "the marker must be followed by a ```python block"
    return match.group(1)


def test_the_readme_offline_example_records_then_replays(tmp_path):
    (tmp_path / "example.py").write_text(offline_example(), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TAILCUT_", "OPENAI_"))}

    result = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "replayed 3 crossings offline"
    manifest = json.loads((tmp_path / "corpus" / "manifest.json").read_text())
    assert "files" in manifest
    assert {"spans", "traces"} <= {p.name for p in (tmp_path / "data").iterdir()}

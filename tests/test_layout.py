"""The repository layout never shadows the installed package (DESIGN.md section 1)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_components_import_from_the_repository_root():
    # The working directory is the checkout's root, where the Quickstart leaves a user: a top-level
    # folder named `tailcut` would be found first and hide every component but itself.
    code = "import tailcut.demo, tailcut.collector, tailcut.analysis, tailcut.replay, tailcut.exporters"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert not (ROOT / "tailcut").exists()

"""An agent whose payloads hold what RFC 8785 writes differently from tailcut's canonical form of before,
for the old-corpus fixture (``tests/fixtures/corpus_before_jcs``: recorded by tailcut before keys were
sorted by UTF-16 code units) and the test that it still loads, verifies and replays.

Regenerate the fixture only with the code it stands for (never with today's):
``python -m tests.canonical_support tests/fixtures/corpus_before_jcs/corpus`` from a checkout of that code.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import tailcut

ORDER: dict[str, Any] = {
    "qty": 3.0,  # 3 in RFC 8785; tailcut keeps floats floats
    "ratio": 1e16,  # 10000000000000000 in RFC 8785
    "small": 1e-6,  # 0.000001 in RFC 8785
    "tiny": 1.5e-7,
    "huge": 1e21,
    "zero": -0.0,  # 0 in RFC 8785
    "name": "\u20ac\t\u2028\U0001f600\x7f",
    "\U0001f600": 1,  # an astral key sorts before U+FB33 by UTF-16 code units, after it by code points
    "\ufb33": 2,
}
STRING_KEYED: dict[str, Any] = {"status": "shipped", "amount": 12.5, "items": [1, 2, "three"], "ok": True}


@tailcut.tool(name="quote")
def quote(order: dict[str, Any]) -> dict[str, Any]:
    return {"price": 20.0, "order": order}


@tailcut.tool(name="lookup")
def lookup(order_id: int) -> dict[str, Any]:
    return dict(STRING_KEYED, order_id=order_id)


def agent(order: dict[str, Any]) -> dict[str, Any]:
    with tailcut.run("agent", input=order) as run:
        found = lookup(7)
        priced = quote(order)
        run.set_outcome("pass")
        return {"found": found, "priced": priced}


def write_fixture(out: Path) -> None:
    from tests.replay_support import record_corpus

    work = Path(tempfile.mkdtemp())
    corpus, _ = record_corpus(work, [lambda: agent(ORDER)])
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(corpus, out)
    shutil.rmtree(work)


if __name__ == "__main__":
    write_fixture(Path(sys.argv[1]))

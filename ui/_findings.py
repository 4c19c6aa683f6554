"""Where the viewer's findings come from: one function, so the source can change in one place.

Today the findings are :meth:`Dataset.classify`'s, computed once when the viewer opens the data dir
(it registers the ``findings`` table the pages query). A persistent ``findings/`` table in the data dir
would replace the call here and nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tailcut.analysis import Dataset


def ensure_findings(dataset: Dataset) -> None:
    """Make the ``findings`` table (trace, category, first span, layer, evidence) queryable on ``dataset``."""
    if not dataset.has_findings():
        dataset.classify()

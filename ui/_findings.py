"""Where the viewer's findings come from: one function, so the source can change in one place.

The findings are the data dir's ``findings/`` table when it is current, else :meth:`Dataset.classify`'s,
computed once when the viewer opens the data dir and kept in memory: the viewer is read-only and never
writes into the data dir (it registers the ``findings`` table the pages query).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tailcut.analysis import Dataset


def ensure_findings(dataset: Dataset) -> None:
    """Make the ``findings`` table (trace, category, first span, layer, evidence) queryable on ``dataset``."""
    if not dataset.has_findings():
        dataset.ensure_findings(store=False)

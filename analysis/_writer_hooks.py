"""What analysis wires into a pipeline's data-dir writer: per-trace features and the findings refresh.

Storage never imports analysis (DESIGN.md section 1): the owners of a writer ask for these hooks. ``tailcut
ingest`` is registered from :mod:`tailcut.analysis.cli` with them; the collector, which sits beside
analysis rather than above it, names :func:`pipeline_hooks` (``tailcut.collector._sink.ANALYSIS_HOOKS``)
and loads it when it opens its writer, as the ``tailcut`` command group loads its commands.
"""

from __future__ import annotations

from tailcut.analysis._features_worker import FeatureHook
from tailcut.analysis._refresh import DEFAULT_INTERVAL, FindingsRefresher
from tailcut.exporters._hooks import WriterHook
from tailcut.exporters._location import is_remote


def pipeline_hooks(data_dir: str, *, roll_seconds: float = 0.0) -> list[WriterHook]:
    """Fresh hooks for one writer of ``data_dir``: the classifier's features of every spans batch, and (for
    a local data dir) ``findings/`` refreshed after publishes, at most once per ``roll_seconds`` and at
    least :data:`~._refresh.DEFAULT_INTERVAL` apart (a busy collector must not reclassify its whole data
    dir every few seconds).

    Examples
    --------
    ::

        with DataDirWriter("data", hooks=pipeline_hooks("data")) as writer:
            ...
    """
    hooks: list[WriterHook] = [FeatureHook()]
    if not is_remote(data_dir):
        hooks.append(FindingsRefresher(data_dir, interval=max(DEFAULT_INTERVAL, roll_seconds)))
    return hooks

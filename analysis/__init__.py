"""Analysis of a data dir: DuckDB SQL over span trees, failure classification, selection, statistics.

Examples
--------
::

    from rich.console import Console
    from tailcut.analysis import Dataset, build_report

    data = Dataset("data")
    data.sql("SELECT category, layer, count(*) FROM findings GROUP BY ALL")  # kept in data/findings/
    build_report(data).render_terminal(Console())
"""

from tailcut.analysis import stats
from tailcut.analysis._classify import CATEGORIES, LAYERS, Thresholds, classify
from tailcut.analysis._compare import Comparison, Plan, compare_by, compare_windows, plan
from tailcut.analysis._dataset import Dataset
from tailcut.analysis._errors import (
    AnalysisError,
    DataReadError,
    NoDataError,
    QueryError,
    ResultsFileError,
    UnknownTraceError,
    UnreachableDataError,
)
from tailcut.analysis._estimates import CategoryRate, category_rates
from tailcut.analysis._report import Report, build_report
from tailcut.analysis._results import ResultsComparison, compare_results
from tailcut.analysis._select import CorpusSelection, select_corpus
from tailcut.analysis._verdict import VERDICT_LABELS, GroupCounts, PopulationSample, Verdict, compare_groups

__all__ = [
    "CATEGORIES",
    "LAYERS",
    "VERDICT_LABELS",
    "AnalysisError",
    "CategoryRate",
    "Comparison",
    "CorpusSelection",
    "DataReadError",
    "Dataset",
    "GroupCounts",
    "NoDataError",
    "Plan",
    "PopulationSample",
    "QueryError",
    "Report",
    "ResultsComparison",
    "ResultsFileError",
    "Thresholds",
    "UnknownTraceError",
    "UnreachableDataError",
    "Verdict",
    "build_report",
    "category_rates",
    "classify",
    "compare_by",
    "compare_groups",
    "compare_results",
    "compare_windows",
    "plan",
    "select_corpus",
    "stats",
]

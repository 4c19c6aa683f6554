"""The z-scores' reference sample (:data:`tailcut.analysis._rules.REFERENCE`): an agent's baseline slice, or
of more than ``max_reference`` traces a uniform sub-slice of about that many, chosen by a hash of the trace
id, nested as the cap grows, and with the slice's statistics."""

from __future__ import annotations

import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailcut.analysis import Dataset, Thresholds, _rules
from tailcut.errors import ConfigError
from tailcut.exporters import DataDirWriter

#: Baseline-slice traces of the one agent, and their tokens (a skewed distribution, like tokens are).
SLICE = 3_000
START_NS = 1_767_225_600 * 10**9
#: The ``traces`` counts no z-score reads.
COUNTS = ("error_count", "tool_calls", "max_tool_repeat", "schema_violations", "orphan_count", "late_spans")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    rng = random.Random(5)
    rows = [
        {
            "trace_id": f"{rng.getrandbits(128):032x}",
            "agent_name": "support",
            "start_time": START_NS + i * 10**9,
            "decided_at": START_NS + i * 10**9,
            "span_count": 4 + rng.randint(0, 3),
            "llm_calls": 1 + rng.randint(0, 2),
            "input_tokens": int(rng.lognormvariate(6, 0.5)),
            "output_tokens": 50,
            "max_depth": 2,
            "duration_ms": 100.0 + rng.random() * 50,
            "kept": True,
            "baseline": i < SLICE,
            "inclusion_probability": 0.1 if i < SLICE else 1.0,
            "policies": ["baseline"] if i < SLICE else ["errors"],
            "decision_reason": "baseline" if i < SLICE else "errors",
            "has_root": True,
            **dict.fromkeys(COUNTS, 0),
        }
        for i in range(SLICE + 200)  # and 200 kept failures beside the slice, never in the reference
    ]
    data = tmp_path_factory.mktemp("reference") / "data"
    with DataDirWriter(data) as writer:
        writer.write_traces(rows)
    return Dataset(data)


def chosen(dataset: Dataset, max_reference: int) -> set[str]:
    query = f"WITH {_rules.REFERENCE} SELECT trace_id FROM chosen"
    parameters = _rules.named_parameters(query, Thresholds(max_reference=max_reference).parameters())
    return {trace_id for (trace_id,) in dataset.connection.execute(query, parameters).fetchall()}


def reference(dataset: Dataset, max_reference: int) -> dict[str, object]:
    query = f"WITH {_rules.REFERENCE} SELECT source, n, med_tokens, scale_tokens FROM reference"
    parameters = _rules.named_parameters(query, Thresholds(max_reference=max_reference).parameters())
    [(source, n, median, scale)] = dataset.connection.execute(query, parameters).fetchall()
    return {"source": source, "n": n, "median": median, "scale": scale}


def test_an_agent_within_the_cap_is_referred_to_its_whole_slice(dataset):
    whole = chosen(dataset, SLICE)
    assert len(whole) == SLICE
    baseline = {
        t for (t,) in dataset.connection.execute("SELECT trace_id FROM traces WHERE baseline").fetchall()
    }
    assert whole == baseline
    assert reference(dataset, SLICE)["source"] == "baseline slice"


def test_an_agent_over_the_cap_is_referred_to_a_sub_slice_of_about_that_many(dataset):
    sub = chosen(dataset, 500)
    # binomial(3000, 1/6): mean 500, standard deviation about 20
    assert 420 <= len(sub) <= 580
    assert sub <= chosen(dataset, SLICE)
    assert reference(dataset, 500)["n"] == len(sub)


def test_the_sub_slice_keeps_the_slice_statistics(dataset):
    whole, sub = reference(dataset, SLICE), reference(dataset, 1_000)
    tokens = [
        t
        for (t,) in dataset.connection.execute(
            "SELECT input_tokens + output_tokens FROM traces WHERE baseline"
        ).fetchall()
    ]
    assert whole["median"] == statistics.median(tokens)
    # a median of 1,000 draws: its standard error is about 1.25 σ / √1000 ≈ 0.04 σ
    assert abs(sub["median"] - whole["median"]) < 0.2 * statistics.stdev(tokens)
    assert sub["scale"] == pytest.approx(whole["scale"], rel=0.25)


@settings(max_examples=15, deadline=None)
@given(st.integers(20, SLICE + 100), st.integers(20, SLICE + 100))
def test_sub_slices_are_nested_as_the_cap_grows(dataset, one, other):
    small, large = sorted((one, other))
    assert chosen(dataset, small) <= chosen(dataset, large)


def test_a_cap_below_the_minimum_slice_is_refused():
    with pytest.raises(ConfigError, match="max_reference"):
        Thresholds(min_baseline=50, max_reference=10)


def test_classify_refuses_a_bad_cap_from_the_command_line(dataset: Dataset):
    from click.testing import CliRunner

    from tailcut.cli import cli

    refused = CliRunner().invoke(cli, ["classify", "--data", dataset.location, "--max-reference", "5"])
    assert refused.exit_code == 2 and "max_reference" in refused.output
